"""``litert-fused``: the fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` kernel of a tf_keras LSTM converted
as deployed (``y`` its only output). One conversion (tens of seconds on a loaded 2-core machine),
shared: a one-layer bidirectional stack with random initial states, which exercises the fused
op, ``REVERSE_V2`` and ``CONCATENATION``, the states as model inputs and ``h_n`` read from ``y``
in both directions. The rest needs no conversion.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.runnable import runnable

from harness import compare
from harness.adapters import _litert_deployed, get_adapter
from harness.adapters.base import AdapterFault
from harness.data import Outputs
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")
pytestmark = [pytest.mark.litert, pytest.mark.roads]  # conversions: the nightly's

TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5, dtype="float32",
            initial_state="random", weights={"init": "normal", "scale": 2.0},
            adapters=["litert-fused"])


@pytest.fixture(scope="module")
def bidirectional():
    case = Case(name="fused-bi", cell="lstm", direction="bidirectional", **TINY)
    return case, run_pair(prepare(case), runnable("litert-fused"))


def test_fused_kernel_passes_and_names_its_ops(bidirectional):
    case, r = bidirectional
    assert r.status == compare.PASS, (r.reason, r.detail)
    assert ("LiteRT ran the converted ops REVERSE_V2, UNIDIRECTIONAL_SEQUENCE_LSTM, REVERSE_V2, "
            "UNIDIRECTIONAL_SEQUENCE_LSTM, CONCATENATION") in r.reason
    # h_n is compared (read from y), c_n is not, and the reason says why
    assert set(r.rows["output"]) == {"y", "h_n"}
    assert "c_n not compared: a deployed model outputs y only" in r.reason
    assert r.outputs.models["tflite"][4:8] == b"TFL3"


def test_h_n_from_y_is_the_reference_final_state(bidirectional):
    """Independently of the adapter: the reference's own h_n is y's last step forward and its
    first step in reverse, so reading h_n from y is exact where there are no lengths."""
    case, _ = bidirectional
    ref = prepare(case).reference
    h_n, absent = _litert_deployed.final_states(case, ref.y)
    np.testing.assert_array_equal(h_n, ref.h_n)
    assert set(absent) == {"c_n"}


def test_a_deeper_stack_says_h_n_is_not_compared():
    case = Case(name="deep", cell="lstm", num_layers=2, **TINY)
    h_n, absent = _litert_deployed.final_states(case, np.zeros((2, 4, 3)))
    assert h_n is None and "does not determine the lower layers'" in absent["h_n"]


def test_a_loop_is_an_error_naming_the_ops_never_a_pass():
    """What a tf_keras LSTM with a mask converts to (measured, TensorFlow 2.21)."""
    with pytest.raises(AdapterFault, match="did not emit the fused .* RESHAPE, TRANSPOSE, "
                                           "TRANSPOSE, WHILE, TRANSPOSE"):
        _litert_deployed.require_fused(["RESHAPE", "TRANSPOSE", "TRANSPOSE", "WHILE", "TRANSPOSE"])
    _litert_deployed.require_fused(["REVERSE_V2", "UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2"])


def test_gru_and_lengths_are_not_applicable_with_the_reason():
    adapter = get_adapter("litert-fused")
    gru = Case(name="gru", cell="gru", **TINY)
    assert adapter.not_applicable_reason(gru) == "TFLite has no fused GRU op"
    varlen = Case(name="varlen", cell="lstm", seq_lengths=[4, 2], **TINY)
    assert "WHILE loop" in adapter.not_applicable_reason(varlen)


def test_only_final_states_may_be_absent():
    case = Case(name="c", cell="lstm", **TINY)
    out = Outputs(y=np.zeros((2, 4, 3)), h_n=np.zeros((1, 2, 3)), absent={"y": "no"})
    with pytest.raises(AdapterFault, match="only final states may be absent"):
        get_adapter("litert-fused")._check(case, out)
