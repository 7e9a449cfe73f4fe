"""A wrong gate order planted in a copy of a layout is reported DIVERGED where it first shows.

From a zero initial state the recurrent term is zero at t=0, so a mistake confined to the
recurrent kernel first shows at t=1 (docs/layouts.md, Reading a divergence signature, P1); one in
the input kernel at t=0 (P3).
"""

from __future__ import annotations

import dataclasses

import pytest

from harness import compare
from harness.adapters.torch_cpu import TorchCPU
from harness.layouts import torch as torch_layout
from harness.layouts.base import fused
from harness.prepare import prepare
from harness.runner import run_pair
from harness.spec import Case

pytest.importorskip("torch")


def planted(kind: str):
    """The torch layout with the f and g blocks of ``kind`` swapped (i g f o instead of i f g o)."""

    def describe(case, layer, d):
        tensors = torch_layout.describe(case, layer, d)
        name = {"W": "weight_ih", "R": "weight_hh"}[kind]
        return [fused(case, layer, d, t.name, kind, "igfo", axis=0)
                if t.name.startswith(name) else t
                for t in tensors]

    layout = dataclasses.replace(torch_layout.TORCH, name=f"torch-planted-{kind}",
                                 describe=describe)

    class Planted(TorchCPU):
        name = f"torch-planted-{kind}"

        @property
        def layout(self):
            return layout

    return Planted()


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
