"""Small cases for the harness's own tests: a file states how its cases differ from
:data:`SMALL` once, ``make = case_maker(seed=7, dtype="float64")``, then writes each case as
what it changes, ``make(cell="gru", num_layers=2)``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.spec import Case

# I != H and neither is 1, B > 1: a transposed or mis-sliced block shows up
SMALL: dict[str, Any] = dict(name="t", cell="lstm", input_size=3, hidden_size=4, batch=3,
                             seq_len=6)


def case_maker(**defaults: Any) -> Callable[..., Case]:
    """``make(**kw)``: the :class:`Case` of :data:`SMALL` with ``defaults``, then ``kw``,
    over it."""
    base = {**SMALL, **defaults}

    def make(**kw: Any) -> Case:
        return Case(**{**base, **kw})

    return make


def case_file(path: Path, case: Case) -> Path:
    """``case`` written as a case file at ``path`` (its sizes and flags: no weights, inputs or
    tolerances)."""
    import yaml

    d = case.model_dump(exclude={"source", "weights", "inputs", "tolerance", "adapters",
                                 "exclude", "description"}, exclude_none=True)
    path.write_text(yaml.safe_dump(d))
    return path
