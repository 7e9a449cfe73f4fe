"""The Flax adapters (``flax-linen``, ``flax-linen-optimized``, ``flax-nnx``) and the two layout
facts of flax that a port from PyTorch gets wrong, with the installed flax (0.12.8):

- google/flax#3746: a flax LSTM gate has one bias (the hidden Dense's); PyTorch's ``bias_ih``
  and ``bias_hh`` must be summed into it. Planted: the layout storing ``bW`` alone (the torch
  halves unsummed, only ``bias_ih`` used) must come out DIVERGED, with where.
- google/flax#5469 (the docstring fix of google/flax#4124): the LSTM carry is ``(c, h)``, PyTorch's
  state ``(h, c)``. Planted: the initial carry handed over as ``(h, c)`` must come out DIVERGED
  at step 0.

And one open bug: nnx.GRUCell has no b_hn (google/flax#5594), declared on the bundled GRU cases.

Both facts are of flax's API, not bugs a fix would remove: the mapping table states them
(harness/layouts/flax.py) and these tests keep the harness able to see them. Weights of
trained-like magnitude (scale 2.5, biases a few units). Each new case shape compiles once
(~0.5-1 s).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.runnable import runnable

from harness import compare
from harness.adapters import get_adapter
from harness.layouts import flax as flax_layout
from harness.layouts.base import grid
from harness.pairs import run_pair
from harness.prepare import prepare
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


def test_nnx_gru_diverges_by_the_missing_b_hn_alone(tmp_path):
    """google/flax#5594: nnx.GRUCell has no b_hn, and the layout drops bR_n. With bR_n zero, a
    stacked, bidirectional, variable-length GRU agrees with the reference in every output and
    every gradient but dbR_n (the zero gradient of a block the cell does not read, against the
    reference's): the bundled GRU cases' DIVERGED (declared ``expected:``) is that bias alone."""
    from harness.npz import save_npz
    from harness.params import generate

    case = Case(name="nnx-gru", cell="gru", input_size=3, hidden_size=4, num_layers=2,
                bidirectional=True, batch=3, seq_len=5, seq_lengths=[5, 3, 1],
                initial_state="random", dtype="float64", seed=22, gradients=True)
    save_npz(tmp_path / "w.npz", {k: np.zeros_like(v) if k.endswith("/bR_n") else v
                                  for k, v in generate(case).tensors.items()})
    case = Case.model_validate({**case.model_dump(), "weights": {
        "file": str(tmp_path / "w.npz"), "layout": "canonical"}})
    r = run_pair(prepare(case), runnable("flax-nnx"))
    assert r.status == compare.DIVERGED
    bad = r.rows[r.rows["verdict"] != compare.PASS]
    assert set(bad["output"]) == {"dbR_n"}, bad[["output", "layer", "direction", "max_abs"]]


def test_a_flax_module_that_does_not_import_with_this_jax_is_unavailable_naming_both(
        monkeypatch) -> None:
    """flax 0.12.9's nnx does not import with any jax offered (it subclasses a jax class that is
    not there): the adapter is unavailable, naming the flax and jax releases and the error, and
    the linen adapters, whose module imports, are not."""
    import sys

    import flax
    import jax

    from harness.errors import Unavailable

    monkeypatch.setitem(sys.modules, "flax.nnx", None)  # its import fails as 0.12.9's does
    with pytest.raises(Unavailable) as caught:
        get_adapter("flax-nnx").check_available()
    said = str(caught.value)
    assert said.startswith(f"flax {flax.__version__}'s flax.nnx does not import with jax "
                           f"{jax.__version__} (")
    get_adapter("flax-linen").check_available()
