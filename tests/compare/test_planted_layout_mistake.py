"""A wrong gate order planted in a copy of a layout is reported DIVERGED where it first shows.

From a zero initial state the recurrent term is zero at t=0, so a mistake confined to the
recurrent kernel first shows at t=1 (docs/layouts.md, Reading a divergence signature, P1); one in
the input kernel at t=0 (P3).
"""

from __future__ import annotations

import pytest
from support.planted import planted_torch

from harness import compare
from harness.adapters.torch_cpu import TorchCPU
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("torch")


planted = planted_torch


CASE = Case(name="planted", cell="lstm", input_size=3, hidden_size=4, batch=2, seq_len=6,
            dtype="float32")


def test_correct_layout_passes():
    assert run_pair(prepare(CASE), TorchCPU()).status == compare.PASS


@pytest.mark.parametrize("kind, first_t", [("R", 1), ("W", 0)])
def test_planted_gate_order_diverges_where_it_first_shows(kind, first_t):
    r = run_pair(prepare(CASE), planted(kind))
    assert r.status == compare.DIVERGED
    f = r.first_diverging
    assert (f["output"], f["t"]) == ("y", first_t)
    y = r.rows[r.rows.output == "y"]
    if first_t == 1:  # exact (to float32 rounding) at t=0 from the zero state
        assert y[y.t == 0]["verdict"].eq(compare.PASS).all()
