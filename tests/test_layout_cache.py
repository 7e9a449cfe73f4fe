"""Descriptions and conversion plans are kept per layout and model (``harness.layouts.base.
GEOMETRY``): cases that differ in any other field share them, so no layout may read another
field in ``describe``. Checked here by describing each layout afresh for cases that differ from
a base case in one such field each."""

from __future__ import annotations

import numpy as np
import pytest

from harness.layouts import LAYOUTS, base
from harness.params import generate, layer_dirs
from harness.spec import Case, GeneratedTensors

BASE = {
    "lstm": dict(name="base", cell="lstm", input_size=5, hidden_size=4, num_layers=2,
                 bidirectional=True, batch=3, seq_len=4, dtype="float32"),
    "gru": dict(name="base", cell="gru", input_size=5, hidden_size=4, num_layers=2,
                bidirectional=True, batch=3, seq_len=4, dtype="float32"),
}
# one change each of every field outside GEOMETRY (the forget bias: its value only, see below)
OTHER_FIELDS = {
    "name": "renamed", "description": "words", "batch": 2, "seq_len": 6,
    "seq_lengths": [4, 2, 3], "initial_state": "random", "dtype": "float64", "seed": 9,
    "weights": GeneratedTensors(init="normal", scale=0.3), "inputs": GeneratedTensors(scale=2.0),
    "adapters": ["torch-cpu"], "exclude": ["keras"], "gradients": True,
    "tolerance": {"rtol": 1e-3}, "recurrent_activation": "hard_sigmoid_tf_keras",
    "gate_clip": 2.0,
}
LSTM_ONLY = {"cell_clip": 3.0, "input_forget": True, "forget_bias": 1.0, "proj_clip": 1.5}


def _variants(cell: str) -> list[tuple[str, dict, dict]]:
    """(field, the fields of a case, the same with that field changed)."""
    fields = OTHER_FIELDS | (LSTM_ONLY if cell == "lstm" else {})
    out = []
    for name, value in fields.items():
        ref = BASE[cell] | ({"proj_size": 2} if name == "proj_clip" else {})
        out.append((name, ref, ref | {name: value}))
    return out


def _fresh(layout, case: Case) -> tuple:
    return tuple(t for layer, d in layer_dirs(case) for t in layout.describe(case, layer, d))


def test_geometry_lists_only_case_fields():
    case = Case(**BASE["lstm"])
    assert all(hasattr(case, name) for name in base.GEOMETRY)
    assert set(OTHER_FIELDS) | set(LSTM_ONLY) | set(base.GEOMETRY) >= (
        set(Case.model_fields) - {"bidirectional", "direction", "source"} | {"dir_mode"})


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_no_other_field_changes_a_description(layout, cell):
    lay = LAYOUTS[layout]
    if cell not in lay.cells:
        pytest.skip(f"{layout} holds no {cell}")
    for name, ref, fields in _variants(cell):
        try:
            want = _fresh(lay, Case(**ref))
        except Exception as exc:  # a model the layout cannot hold (e.g. cuDNN: projection)
            pytest.raises(type(exc), _fresh, lay, Case(**fields))
            continue
        case = Case(**fields)
        assert _fresh(lay, case) == want, f"{layout}: {name} changes the description"
        same = base._cache_key(lay, case) == base._cache_key(lay, Case(**ref))
        assert same == (name != "forget_bias"), name  # a folded forget bias: another plan


def test_cases_of_one_model_share_a_plan_and_convert_alike():
    """Two cases of one model (other sizes, seed, dtype, forget bias) share the plan; each
    converts its own parameters with its own forget bias. A folded forget bias changes the
    plan's key, its value does not."""
    lay = LAYOUTS["torch"]
    a = Case(**BASE["lstm"] | {"forget_bias": 1.0})
    b = Case(**BASE["lstm"] | {"forget_bias": 2.5, "seed": 3, "batch": 7, "dtype": "float64"})
    c = Case(**BASE["lstm"])
    assert base._plan(lay, a) is base._plan(lay, b)
    assert base._cache_key(lay, a) != base._cache_key(lay, c)
    for case in (a, b, c):
        canonical = generate(case)
        native = lay.to_native(canonical, case)
        np.testing.assert_array_equal(native["bias_ih_l1_reverse"][4:8],
                                      canonical["layer1/backward/bW_f"] + case.forget_bias)
        back = lay.from_native(native, case)
        for k, v in canonical.tensors.items():
            np.testing.assert_allclose(back[k], v, rtol=0, atol=1e-15, err_msg=k)
