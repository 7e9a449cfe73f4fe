"""One plausible misreading of a weights file (:class:`Mistake`), the :class:`Trial` it edits
(the file's tensors, the reading so far, the case and the data), the stages in which a
hypothesis applies its mistakes, and the names of canonical keys and native tensors the
families build on."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.spec import Case

# stage order in which a hypothesis applies its mistakes
STAGE_RESHAPE, STAGE_READING, STAGE_ORDER, STAGE_OTHER = 0, 1, 2, 3
# one layer's directions swapped: after every mistake confined to that layer, which name the
# slot the weights were read from (the other direction's)
STAGE_MOVE = 4


@dataclass
class Trial:
    """A hypothesis being applied: the file's tensors, the reading so far, case and data."""

    native: dict[str, np.ndarray]
    canonical: dict[str, np.ndarray] | None
    case: Case
    time_major: bool = False
    swap_states: bool = False


@dataclass(frozen=True)
class Mistake:
    """One way the file may really have been read. ``apply`` edits a :class:`Trial` in place
    (assigning new arrays, never writing into shared ones)."""

    id: str
    family: str  # reshape | reading | order | bias | forget | swap | variant | data
    text: str  # the mistake in words: what the claimed reading gets wrong
    slot: str  # two mistakes in one hypothesis never share a slot
    stage: int
    apply: Callable[[Trial], None] = field(compare=False, repr=False)
    fixable: bool = True  # a corrected weights file can absorb it (not: case or data changes)
    short: str = ""  # a shorter wording that needs no claimed layout (blind-spot notes)

    @property
    def brief(self) -> str:
        return self.short or self.text


def kind_of(k: str) -> str:
    """Canonical kind of a key: W, R, bW, bR, p or Wp."""
    name = k.rsplit("/", 1)[1]
    return name if name == "Wp" else name.split("_")[0]


def gate_of(k: str) -> str:
    return k.rsplit("/", 1)[1].split("_", 1)[1]


def base_name(name: str) -> str:
    """A native tensor name without its layer/direction scoping (``layer1/backward/kernel`` ->
    ``kernel``, ``weight_hh_l1_reverse`` -> ``weight_hh``)."""
    name = re.sub(r"^layer\d+/((forward|backward)/)?", "", name)
    return re.sub(r"_l\d+(_reverse)?$", "", name)


def flat_index(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(int(np.prod(shape)) if shape else 1).reshape(shape)

