"""``litert-dynamic`` on an LSTM too small for dynamic-range quantization (issue 54, item 8):
the converter leaves weight tensors under 1024 elements float by design, so the pair is not
applicable with that reason, not an error row "nothing was quantized".

The decision needs no conversion (it runs before the adapter is asked whether it can run); the
conversions that measure the rule are the nightly's."""

from __future__ import annotations

import pytest
from support.runnable import runnable

from harness import compare
from harness.adapters import get_adapter
from harness.frameworks import litert_flatbuffer
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case


def lstm(input_size: int, hidden_size: int, **kw) -> Case:
    return Case(name=f"q{input_size}x{hidden_size}", cell="lstm", input_size=input_size,
                hidden_size=hidden_size, batch=2, seq_len=4, seed=5, dtype="float32",
                quantization={"calibration_batches": 2}, adapters=["litert-dynamic"], **kw)


def test_a_small_lstm_is_not_applicable_with_the_reason():
    r = run_pair(prepare(lstm(2, 3)), get_adapter("litert-dynamic"))
    assert r.status == compare.NOT_APPLICABLE, (r.status, r.reason)
    assert r.reason == (
        "the converter's dynamic-range quantization leaves weight tensors under 1024 elements "
        "float, by design, and quantizes a fused LSTM only when all its per-gate weights reach "
        "that; this case's input weights have 3 x 2 = 6 elements per gate and recurrent "
        "weights have 3 x 3 = 9 elements per gate: nothing would be quantized"), r.reason


# (I, H, layers, bidirectional, what is small): the first five measured with TensorFlow 2.21
SIZES = [
    (2, 3, 1, False, ["input", "recurrent"]),
    (8, 32, 1, False, ["input"]),  # H x H = 1024 alone is not enough
    (64, 16, 1, False, ["recurrent"]),  # nor H x I = 1024 alone
    (32, 32, 1, False, []),
    (16, 64, 1, False, []),
    (32, 32, 2, True, []),  # the upper layer's inputs are 2H wide
    (8, 32, 2, False, ["input"]),  # the lowest layer's are what they are
]


def test_the_decision_on_sizes():
    checked = 0
    for I, H, layers, bidirectional, small in SIZES:
        reason = get_adapter("litert-dynamic").not_applicable_reason(
            lstm(I, H, num_layers=layers, bidirectional=bidirectional))
        said = [w for w in ("input", "recurrent") if reason and f"{w} weights have" in reason]
        assert said == small, (I, H, layers, reason)
        checked += 1
    assert checked == len(SIZES) == 7


@pytest.mark.litert
@pytest.mark.roads  # two conversions, each in a process of its own: the nightly's
def test_the_converters_rule_holds_at_its_edge_and_a_large_lstm_is_quantized():
    """The rule as the converter applies it: I=8, H=32 (recurrent weights of 1024 elements,
    input weights of 256) converts to a float LSTM; I=H=32 is quantized, and passes."""
    adapter = runnable("litert-dynamic")
    edge = prepare(lstm(8, 32))
    native = adapter.layout.to_native(edge.canonical, edge.case, adapter.native_dtype(edge.case))
    model = adapter.convert(edge.case, native)
    assert litert_flatbuffer.integer_recurrent_tensors(model) == []
    r = run_pair(prepare(lstm(32, 32)), adapter)
    assert r.status == compare.PASS, (r.status, r.reason)
    assert "integer tensors in the recurrent ops: INT8" in r.reason
    # the converter sets asymmetric_quantize_inputs (TensorFlow 2.21): the hybrid kernel's
    # affine per-row activations, modelled to float32's rounding (docs/quantization.md)
    assert r.outputs.quantized.activations == litert_flatbuffer.HYBRID_ASYMMETRIC
    steps = float(r.reason.split("within ", 1)[1].split(" output steps", 1)[0])
    assert steps < 1e-3, r.reason
