"""The doctor's corrected mapping for a file that lacks its recurrent bias (issue 54, item 5):
the slices the file holds right read "same", and only the dropped half is flagged.

The fit of the missing half may move GRU reset-after's ``bW_n`` with the ``bR`` blocks (it acts
outside ``r * (...)``); left at its rounding noise, a correct ``bW_n`` read as "none of the
blocks as such", once per layer."""

from __future__ import annotations

import numpy as np
from support.case_factory import case_maker

from harness import data, params, reference
from harness.doctor import diagnose, render
from harness.dtypes import round_to
from harness.layouts import get_layout
from harness.params import Canonical

make = case_maker(name="dropped", batch=2)


def test_only_the_dropped_recurrent_bias_is_flagged() -> None:
    """A GRU port from Keras to torch that left ``bias_hh`` at zero, its outputs from Keras,
    which ran with both halves: the mapping flags the three bR slices, every other slice is
    as claimed."""
    case = make(cell="gru", initial_state="random")
    truth = params.generate(case)
    dropped = Canonical({k: (np.zeros_like(v) if "/bR_" in k else v)
                         for k, v in truth.tensors.items()})
    lay = get_layout("torch")
    inputs = data.generate(case)
    expected = {k: round_to(v, "float32")
                for k, v in reference.run(case, truth, inputs).named().items()}
    dx = diagnose(case, lay, lay.to_native(dropped, case), inputs, expected)
    assert dx.best is not None and [m.id for m in dx.best.hypothesis] == ["bias:missing-half"]
    flagged = {r["claimed"]: r["actually"] for r in dx.mapping if r["actually"] != "same"}
    assert set(flagged) == {"bR_r", "bR_z", "bR_n"}, flagged
    assert all(v.startswith("zeros: the values the framework ran with are missing")
               for v in flagged.values()), flagged
    assert len(dx.mapping) == 12  # W, R, bW, bR: 3 gates each
    assert "none of the blocks as such" not in render(dx)
