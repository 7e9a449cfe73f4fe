"""What a diagnosis found: the hypotheses that reproduce the outputs (:class:`Finding`), what
the layer-by-layer search found at each layer and direction (:class:`Place`,
:class:`LocalSearch`), and the whole :class:`Diagnosis` the renderers print."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.layouts.base import Layout
from harness.mistakes.scoring import Hypothesis, Score
from harness.spec import Case

# A hypothesis that misses is shown as a near miss only within this many tolerances: one at
# 1e4x tolerance is no nearer the truth than any other, and would mislead.
NEAR_MISS = 10.0

@dataclass
class Finding:
    hypothesis: Hypothesis
    score: Score


@dataclass
class Place:
    """What the layer-by-layer search found at one layer and direction."""

    layer: int
    direction: int
    status: str  # exact | fixed | no fix | stopped | not searched
    mistakes: Hypothesis = ()
    tried: int = 0  # hypotheses evaluated on this layer and direction alone
    swapped: bool = False  # its weights are read from the other direction's slot


@dataclass
class LocalSearch:
    """The search for mistakes confined to one layer and direction. ``mode``: ``per-layer``
    (each layer judged alone on its final states, y for the last: the expected outputs hold
    h_n) or ``y-only`` (no final states: the last layer judged alone on y, the lower ones as
    claimed; then each confined single mistake judged on y of the whole stack, ``joint``)."""

    mode: str
    places: list[Place] = field(default_factory=list)
    tried: int = 0
    stopped: bool = False
    note: str = ""  # only y: what the joint search tried
    joint: int = 0  # only y: confined single mistakes judged on y of the whole stack
    everywhere: str = ""  # where the mistake found is made in every layer and direction
    whole_ok: bool | None = None  # whether the composed fix reproduces every expected output


@dataclass
class Diagnosis:
    case: Case
    layout: Layout
    source: str  # where the expected outputs came from
    claim: Score
    signature: list[str]
    found: list[Finding]
    closest: list[Finding]
    noops: list[tuple[str, str]]
    evaluated: int = 0
    seconds: float = 0.0
    stopped: bool = False  # the time budget ran out before the search was complete
    fixed: dict[str, np.ndarray] | None = None
    fixed_case: Case | None = None
    fixed_error: float | None = None
    mapping: list[dict[str, str]] = field(default_factory=list)
    local: LocalSearch | None = None

    @property
    def best(self) -> Finding | None:
        return self.found[0] if self.found else None
