"""The float64 equations every reproducer carries (harness/repro/equations.py, NumPy only)
agree with the harness's reference on each feature they implement, and the features they do
not implement are refused (no script with a wrong expectation)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.prepare import prepare
from harness.repro import equations
from harness.repro.record import script_spec, unsupported
from harness.spec import Case

BASE = dict(input_size=3, hidden_size=2, batch=3, seq_len=4, initial_state="random",
            dtype="float64", seed=8)


@pytest.mark.parametrize("extra", [
    dict(cell="lstm", bidirectional=True, num_layers=2, seq_lengths=[4, 2, 3],
         forget_bias=1.0, gate_clip=0.7),
    dict(cell="lstm", direction="reverse", seq_lengths=[1, 4, 2]),
    dict(cell="gru", reset_after=True, bidirectional=True, num_layers=2, seq_lengths=[3, 4, 1]),
    dict(cell="gru", reset_after=False, direction="reverse", gate_clip=0.5),
], ids=["lstm-bi-2l-len-fb-clip", "lstm-reverse-len", "gru-after-bi-2l-len",
        "gru-before-reverse-clip"])
def test_equations_agree_with_the_reference(extra):
    case = Case(name="eq", **BASE, **extra)
    assert unsupported(case) == ""
    prep = prepare(case)
    x = prep.inputs
    ys, h_n, c_n = equations.stack(script_spec(case), prep.canonical.tensors, x.x, x.lengths,
                                   x.h0, x.c0)
    ref = prep.reference
    for k, y in enumerate(ref.y_layers or [ref.y]):
        np.testing.assert_allclose(ys[k], y, rtol=1e-12, atol=1e-13, err_msg=f"y layer {k}")
    np.testing.assert_allclose(h_n, ref.h_n, rtol=1e-12, atol=1e-13)
    if ref.c_n is not None:
        np.testing.assert_allclose(c_n, ref.c_n, rtol=1e-12, atol=1e-13)


def test_features_the_equations_lack_are_refused():
    case = Case(name="eq", cell="lstm", peepholes=True, proj_size=1, **BASE)
    why = unsupported(case)
    assert "peephole" in why and "projection" in why
    assert "hard_sigmoid" in unsupported(Case(name="eq", cell="gru", **BASE,
                                              recurrent_activation="hard_sigmoid_keras3"))


def test_source_is_self_contained():
    text = equations.source()
    assert "harness" not in text and text.count("import ") == 1  # NumPy only
    namespace: dict = {}
    exec(compile(text, "equations", "exec"), namespace)  # runs on its own
    assert callable(namespace["stack"])
