"""The dynamic-int8 adapters (``onnxruntime-dynamic-int8``, ``torch-dynamic-int8``), the dynamic
activation quantization of the yardstick (harness/quantization.py) and the planted bugs of
tests/support/dynamic_mutants.py, on a tiny LSTM and GRU (each run well under a second)."""

from __future__ import annotations

import numpy as np
import pytest
from support.dynamic_mutants import CATALOGUE, AffineWeights, PlantedDynamic, skewed
from support.runnable import runnable

from harness import compare, grids
from harness.adapters.base import AdapterFault
from harness.adapters.torch_dynamic import quantized_module, stored_weights
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5, dtype="float32",
            quantization={"calibration_batches": 2})


@pytest.fixture(scope="module")
def lstm():
    pytest.importorskip("onnxruntime")
    names = ["onnxruntime-dynamic-int8", AffineWeights.name,
             *(PlantedDynamic(bug).name for bug in CATALOGUE)]
    return prepare(Case(name="dq-lstm", cell="lstm", adapters=names, **TINY))


def test_activation_grid_is_the_kernels_affine_uint8_range():
    a = np.array([[-1.0, 0.5], [0.25, 2.0]])
    act = grids.DynamicActivation(0, 255)
    g = act.grid(-1.0, 2.0)
    assert g.scale == pytest.approx(3.0 / 255) and g.zero_point == 85
    assert np.allclose(act.round(a), g.round(a))
    rows = grids.DynamicActivation(0, 127, rows=1)
    per_row = rows.round(a)  # each row on the grid of its own range
    assert np.allclose(per_row[0], rows.grid(-1.0, 0.5).round(a[0]))
    assert np.allclose(per_row[1], rows.grid(0.0, 2.0).round(a[1]))
    assert rows.grid(0.0, 2.0).zero_point == 0 and per_row[1, 1] == pytest.approx(2.0)
    assert np.all(grids.DynamicActivation(0, 255).round(np.zeros((2, 2))) == 0)


@pytest.mark.onnx
def test_onnxruntime_dynamic_passes_on_its_integer_aware_reference(lstm):
    r = run_pair(lstm, runnable("onnxruntime-dynamic-int8"))
    assert r.status == compare.PASS, (r.reason, r.detail)
    assert "DynamicQuantizeLSTM" in r.reason and "SQNR" in r.reason
    assert r.rows.loc[r.rows["output"] == "y", "sqnr_db"].notna().all()


@pytest.mark.onnx
@pytest.mark.roads  # the mutation test: with the nightly's (the default run keeps the clean pair)
@pytest.mark.parametrize("bug", sorted(CATALOGUE))
def test_planted_dynamic_bug_is_diverged(lstm, bug):
    prep = skewed(lstm) if bug == "weights-zero-point-ignored" else lstm
    if bug == "weights-zero-point-ignored":  # the clean pair on the same weights passes
        clean = run_pair(prep, AffineWeights())
        assert clean.status == compare.PASS, clean.reason
    r = run_pair(prep, PlantedDynamic(bug))
    assert r.status == compare.DIVERGED, r.reason


@pytest.mark.onnx
@pytest.mark.roads
def test_onnxruntime_dynamic_gru_is_not_applicable_with_the_measured_reason():
    pytest.importorskip("onnxruntime")
    prep = prepare(Case(name="dq-gru", cell="gru", adapters=["onnxruntime-dynamic-int8"],
                        **TINY))
    r = run_pair(prep, runnable("onnxruntime-dynamic-int8"))
    assert r.status == compare.NOT_APPLICABLE, r.reason
    assert "no quantizer for GRU" in r.reason


@pytest.mark.torch
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_torch_dynamic_passes_with_packed_int8_weights(cell):
    prep = prepare(Case(name=f"dq-{cell}", cell=cell, adapters=["torch-dynamic-int8"], **TINY))
    r = run_pair(prep, runnable("torch-dynamic-int8"))
    assert r.status == compare.PASS, (r.reason, r.detail)
    assert "weights packed qint8" in r.reason and "pytorch/ao#2259" in r.reason


@pytest.mark.torch
def test_a_float_module_is_nothing_quantized():
    torch = pytest.importorskip("torch")
    bare = torch.nn.LSTM(2, 3)
    assert type(quantized_module(torch, bare)).__module__.startswith("torch.ao.nn.quantized")
    with pytest.raises(AdapterFault, match="nothing was quantized"):
        stored_weights(bare)


@pytest.mark.onnx
def test_an_lstm_the_quantizer_left_float_is_nothing_quantized(lstm, monkeypatch):
    from harness.adapters import onnxruntime_dynamic

    monkeypatch.setattr(onnxruntime_dynamic, "quantize", lambda model, **_: model)
    r = run_pair(lstm, runnable("onnxruntime-dynamic-int8"))
    assert r.status == compare.ERROR and "nothing was quantized" in r.reason, r.reason
