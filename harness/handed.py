"""What an adapter hands its framework, as data: recorded while it runs (``Outputs.handed``),
so that a reproducer is written later without importing the framework.

A :class:`Handed` names the renderer of its framework family (``family``), the constructor and
call arguments (``call``: JSON values only), the arrays as the framework got them (``arrays``:
the weights in its own layout and names, the inputs it was fed) and any converted or exported
bytes (``files``: ``model.onnx``, a LiteRT ``model.tflite``, an ExecuTorch ``model.pte``).
This module imports NumPy and the families' registry (harness/families/) only: it sits beside
:mod:`harness.data` (``Outputs.handed``), below the adapters that record it and the reproducers
that read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import families

FAMILIES = tuple(families.FAMILIES)
"""The framework families a reproducer can be rendered for (harness/families/)."""


@dataclass
class Handed:
    family: str
    call: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.family in FAMILIES, self.family

    @property
    def nbytes(self) -> int:
        return (sum(int(a.nbytes) for a in self.arrays.values())
                + sum(len(b) for b in self.files.values()))
