"""The cell kinds the harness knows (LSTM, GRU) as data: gates, states, the case fields each
reads and the rules about its parameters that several modules need.

Code asks the cell (``case.cell_kind.has_cell_state``), not its name: a third kind is an
entry here plus its equations (harness/reference/<name>.py and <name>_backward.py) and the
layouts that can hold it (docs/cells.md walks through one). The per-cell equation files keep
their own names for the gates; everything else reads them from here.

This module imports nothing from harness, so the case model (harness/spec.py) can use it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cell:
    """One cell kind.

    ``gates``: the canonical gate order (the harness's own; every layout maps its order onto
    this one, docs/layouts.md). ``states``: the recurrent states a layer carries, h first.
    ``fields``: the case fields only this kind reads (a case of another kind that sets one
    is refused). ``blocks``: the parameter blocks of one layer and direction, per gate where
    the name ends in ``_``. ``reset_gate``: the gate whose product with the recurrent term makes
    that term's bias act apart from the input one when applied after the product (GRU
    ``reset_after``), or None."""

    name: str
    gates: tuple[str, ...]
    states: tuple[str, ...]
    fields: tuple[str, ...]
    blocks: tuple[str, ...] = ("W_", "R_", "bW_", "bR_")
    reset_gate: str | None = None
    candidate: str = ""  # the gate whose activation is tanh (the candidate state)

    @property
    def has_cell_state(self) -> bool:
        """A cell state c beside h (its c0, c_n, and the gradients of both)."""
        return "c" in self.states

    @property
    def final_states(self) -> tuple[str, ...]:
        """The names of the final-state outputs: ``h_n`` (and ``c_n``)."""
        return tuple(f"{s}_n" for s in self.states)

    @property
    def initial_states(self) -> tuple[str, ...]:
        """The names of the initial-state inputs: ``h0`` (and ``c0``)."""
        return tuple(f"{s}0" for s in self.states)

    def separate_biases(self, reset_after: bool) -> tuple[str, ...]:
        """The gates whose input and recurrent biases act separately, so they cannot be summed
        into one: a GRU's n gate with ``reset_after`` (r multiplies ``R_n h + bR_n``), else
        none (each gate sees ``bW + bR``)."""
        return (self.candidate,) if self.reset_gate and reset_after else ()

    def reads(self, field: str) -> bool:
        """Whether a case of this kind reads ``field`` (one of :attr:`fields` of some kind)."""
        return field in self.fields


LSTM = Cell(
    name="lstm", gates=("i", "f", "g", "o"), states=("h", "c"), candidate="g",
    fields=("proj_size", "peepholes", "cell_clip", "proj_clip", "input_forget", "forget_bias"))
GRU = Cell(
    name="gru", gates=("r", "z", "n"), states=("h",), candidate="n", reset_gate="r",
    fields=("reset_after",))

CELLS: dict[str, Cell] = {c.name: c for c in (LSTM, GRU)}
"""Every kind, by the name cases give it (``cell: lstm``)."""


def cell_named(name: str) -> Cell:
    """The kind a case names; KeyError for a name the registry does not hold."""
    return CELLS[name]


def cell_with_gates(count: int) -> Cell | None:
    """The kind whose layer has ``count`` gate blocks (what a weights file's shapes tell),
    or None."""
    return next((c for c in CELLS.values() if len(c.gates) == count), None)
