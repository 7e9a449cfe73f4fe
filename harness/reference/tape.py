"""What a forward cell keeps for the backward: its input and, per step, its named values."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from harness.reference.functions import Array, array_namespace


@dataclass
class Tape:
    """One direction's forward: ``x`` [B, T, in] and ``valid`` [B, T] as the cell read them
    (time-ordered: a reverse direction's reversed input), and ``steps[t]``: the values the cell
    recorded at step t, by the names of its equations (``steps[t].c_prev``)."""

    x: Array
    valid: Array
    steps: list[SimpleNamespace] = field(default_factory=list)

    def record(self, **values: Array | None) -> None:
        """Keep this step's values (the cell calls it once per step, in time order)."""
        self.steps.append(SimpleNamespace(**values))

    def over_time(self, name: str) -> Array:
        """The value ``name`` of every step, [B, T, ...]."""
        values = [getattr(s, name) for s in self.steps]
        return array_namespace(*values).stack(values, axis=1)
