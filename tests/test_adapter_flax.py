"""The Flax adapters (``flax-linen``, ``flax-linen-optimized``) and the two layout facts of flax
that a port from PyTorch gets wrong, with the installed flax (0.12.8):

- google/flax#3746: a flax LSTM gate has one bias (the hidden Dense's); PyTorch's ``bias_ih``
  and ``bias_hh`` must be summed into it. Planted: the layout storing ``bW`` alone (the torch
  halves unsummed, only ``bias_ih`` used) must come out DIVERGED, with where.
- google/flax#5469 (the docstring fix of google/flax#4124): the LSTM carry is ``(c, h)``, PyTorch's
  state ``(h, c)``. Planted: the initial carry handed over as ``(h, c)`` must come out DIVERGED
  at step 0.

Both are facts of flax's API, not bugs a fix would remove: the mapping table states them
(harness/layouts/flax.py) and these tests keep the harness able to see them. Weights of
trained-like magnitude (scale 2.5, biases a few units). Each new case shape compiles once
(~0.5-1 s).
"""

from __future__ import annotations

import dataclasses

import pytest
from runnable import runnable

from harness import compare
from harness.adapters import get_adapter
from harness.layouts import flax as flax_layout
from harness.layouts.base import grid
from harness.prepare import prepare
from harness.runner import run_pair
from harness.spec import Case

pytest.importorskip("flax")
pytestmark = pytest.mark.jax

TRAINED = dict(input_size=3, hidden_size=4, batch=2, seq_len=5, initial_state="random",
               dtype="float32", seed=21, weights={"init": "normal", "scale": 2.5})


def test_linen_lstm_trained_like_passes_and_carry_is_c_h():
    """The plain pair passes on trained-like weights with a random (h0, c0): the carry order
    and the summed biases are right as shipped."""
    r = run_pair(prepare(Case(name="flax-ok", cell="lstm", **TRAINED)),
                 runnable("flax-linen"))
    assert r.status == compare.PASS, r.reason


def test_planted_unsummed_torch_bias_diverges_with_where():
    """google/flax#3746 planted: hi/hf/hg/ho bias = bW only (PyTorch's bias_ih, bias_hh not
    summed)."""
    adapter = runnable("flax-linen")

    def describe(case, layer, d):
        out = []
        for t in flax_layout.describe(case, layer, d):
            gate = t.name.split("/")[-2]
            if t.name.endswith("/bias") and gate.startswith("h"):
                t = grid(case, layer, d, t.name, [[f"bW_{gate[1]}"]], fold_forget_bias=True)
            out.append(t)
        return out

    layout = dataclasses.replace(flax_layout.FLAX, name="flax-planted-bias", describe=describe)

    class Planted(type(adapter)):
        name = "flax-planted-bias"

        @property
        def layout(self):
            return layout

    r = run_pair(prepare(Case(name="flax-bias", cell="lstm", **TRAINED)), Planted())
    assert r.status == compare.DIVERGED
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 0, 0, 0), \
        compare.where(f)
    assert r.step_rows is not None and len(r.step_rows), "no step-local finding"


def test_planted_carry_h_c_order_diverges_at_step_0(monkeypatch):
    """google/flax#5469 planted: the initial carry handed over as PyTorch's (h, c)."""
    from harness.adapters import _flax

    adapter = runnable("flax-linen")
    monkeypatch.setattr(_flax, "_COMPILED", {})  # trace again with the planted carry
    monkeypatch.setattr(_flax, "_carry",
                        lambda case, h, c: (h, c) if case.cell == "lstm" else h)
    r = run_pair(prepare(Case(name="flax-carry", cell="lstm", **TRAINED)), adapter)
    assert r.status == compare.DIVERGED
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 0, 0, 0), \
        compare.where(f)
    assert r.step_rows is not None and len(r.step_rows), "no step-local finding"


@pytest.mark.parametrize("name, case, why", [
    ("flax-linen", dict(cell="gru", reset_after=False), "no reset_after=False form"),
    ("flax-linen-optimized", dict(cell="gru"), "no optimized GRU cell"),
    ("flax-linen", dict(cell="lstm", peepholes=True), "no peephole connections"),
])
def test_not_applicable_with_reasons(name, case, why):
    reason = get_adapter(name).not_applicable_reason(
        Case(name="na", input_size=3, hidden_size=4, **case))
    assert reason is not None and why in reason
