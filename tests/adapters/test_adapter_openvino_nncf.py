"""``openvino-nncf-int8``: NNCF's static int8 on the harness's ONNX graph in OpenVINO, judged by
the quantization yardstick (harness/quantization.py, docs/quantization.md).

Each quantization and compilation costs seconds on a busy 2-core machine: those tests are the
nightly's (``roads``). The reset-before GRU is the one recurrent op NNCF quantizes; an LSTM's
weights it leaves float, and the row is an error, never a pass on a float kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.runnable import runnable

from harness import compare, quantization
from harness.adapters import get_adapter, select
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5, dtype="float32",
            quantization={"calibration_batches": 4}, adapters=["openvino-nncf-int8"])


def test_runs_quantized_cases_only_and_when_named():
    adapter = get_adapter("openvino-nncf-int8")
    assert "not a quantized case" in adapter.not_applicable_reason(
        Case(name="float", cell="gru", input_size=2, hidden_size=3, batch=2, seq_len=4))
    assert adapter not in select(None)
    assert adapter.named_only


@pytest.mark.openvino
@pytest.mark.roads  # NNCF's calibration and a compilation: the nightly's
def test_int8_gru_is_judged_on_the_weights_and_grid_it_stores():
    prep = prepare(Case(name="q-gru", cell="gru", reset_after=False, **TINY))
    r = run_pair(prep, runnable("openvino-nncf-int8"))
    assert "GRUSequence: W, R int8, X FakeQuantize" in r.reason, r.reason
    assert "RNNSeq in u8" in r.reason
    assert "SQNR" in r.reason and "integer-aware reference" in r.reason
    y = r.rows[r.rows["output"] == "y"]
    assert y["sqnr_db"].notna().all() and (y["rmse_steps"] > 0).all()
    model = r.outputs.quantized
    assert model.scheme == "int8" and model.output is not None
    step = model.output.scale
    assert 0 < step < 2.0 / 255 * 1.5  # x of the case lies in [-1, 1]: a u8 grid about it
    for name, stored in model.weights.items():  # stored int8 x scale: near, not equal
        original = prep.canonical.tensors[name]
        bound = float(np.max(np.abs(original))) / 127.0
        assert np.max(np.abs(stored - original)) <= bound, name
    assert any(not np.array_equal(model.weights[k], prep.canonical.tensors[k])
               for k in model.weights if k.split("/")[-1].startswith("W"))
    # the verdict is the yardstick's, whatever it is: the pair's rows are in output steps
    assert r.rows["atol"].iloc[0] == pytest.approx(
        (quantization.K_STEPS + quantization.READ_BACK_STEPS) * step)
    assert r.status in (compare.PASS, compare.DIVERGED)


@pytest.mark.openvino
@pytest.mark.roads  # NNCF's calibration and a compilation: the nightly's
def test_lstm_with_float_weights_is_never_a_pass():
    """NNCF leaves LSTMSequence's weights float: nothing int8 to judge, said with what ran."""
    prep = prepare(Case(name="q-lstm", cell="lstm", **TINY))
    r = run_pair(prep, runnable("openvino-nncf-int8"))
    assert r.status == compare.NOT_APPLICABLE, (r.status, r.reason)
    assert "NNCF does not quantize this op's weights" in r.reason
    assert "LSTMSequence: W, R float" in r.reason and "RNNSeq in f32" in r.reason
