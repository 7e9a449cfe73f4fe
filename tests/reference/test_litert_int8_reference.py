"""The integer reference of LiteRT's full-integer LSTM (harness/reference/litert_int8_lstm.py,
docs/quantization.md "The integer reference") against the LiteRT interpreter, to the bit.

The default tests need no conversion: ``data/litert-int8-lstm-tiny.tflite`` (3.5 KB) is the
``litert-int8`` adapter's conversion (TensorFlow 2.21) of a tiny LSTM: ``cell: lstm``,
``input_size: 2``, ``hidden_size: 3``, ``batch: 2``, ``seq_len: 4``, ``seed: 5``,
``quantization: {calibration_batches: 4}``. The roads tests convert afresh with the
project's conversion path (so that a converter that changes what it writes is seen): that case
and every bundled quantized LSTM case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.reference import fixed_point as fp
from harness.reference.litert_int8_lstm import NotModelled, lstm_ops, run_model

TINY_MODEL = Path(__file__).parent / "data" / "litert-int8-lstm-tiny.tflite"
TINY = dict(cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5,
            dtype="float32", quantization={"calibration_batches": 4})


def _inputs(shape: tuple[int, ...], seeds: range) -> list[np.ndarray]:
    """Inputs within the calibrated range and far past it (the quantized input saturates, and
    so do the gates)."""
    return [np.random.default_rng(s).standard_normal(shape).astype(np.float32) * scale
            for s in seeds for scale in (0.5, 1.0, 20.0)]


def _assert_bit_exact(model: bytes, x: np.ndarray, op_resolver: str | None) -> int:
    """Every tensor every op writes equals the reference's; the number compared."""
    from harness.reference.litert_int8_exact import compare

    differences, _ = compare(model, x, op_resolver)
    off = [d.words() for d in differences if not d.exact]
    assert not off, f"{op_resolver}: " + "; ".join(off)
    return len(differences)


# ---- the fixed-point arithmetic (gemmlowp, TFLite) -----------------------------------------

def test_rounding_divide_by_pot_rounds_ties_away_from_zero():
    x = fp.ints([5, -5, 6, -6, 7, -7, 4, -4])
    assert fp.rounding_divide_by_pot(x, 1).tolist() == [3, -3, 3, -3, 4, -4, 2, -2]
    assert fp.rounding_divide_by_pot(x, 2).tolist() == [1, -1, 2, -2, 2, -2, 1, -1]
    assert fp.rounding_divide_by_pot(x, 0).tolist() == x.tolist()


def test_rounding_doubling_high_mul_saturates_only_min_times_min():
    lo32, lo16 = -(2 ** 31), -(2 ** 15)
    assert fp.saturating_rounding_doubling_high_mul(lo32, lo32) == 2 ** 31 - 1
    assert fp.saturating_rounding_doubling_high_mul(lo16, lo16, 16) == 2 ** 15 - 1
    assert fp.saturating_rounding_doubling_high_mul(lo16, lo16 + 1, 16) == 2 ** 15 - 1
    # a x 2^30 / 2^31 = a / 2: a tie rounds up, for a negative product too (nudge 1 - 2^30)
    assert fp.saturating_rounding_doubling_high_mul(fp.ints([3, -3]), 2 ** 30).tolist() == [2, -1]


def test_quantize_multiplier_is_tflites():
    assert fp.quantize_multiplier(0.5) == (2 ** 30, 0)
    assert fp.quantize_multiplier(1.0) == (2 ** 30, 1)
    assert fp.quantize_multiplier(0.0) == (0, 0)
    assert fp.quantize_multiplier(2.0 ** -40) == (0, 0)  # shift below -31: zero
    assert fp.quantize_multiplier(1 - 2.0 ** -40) == (2 ** 30, 1)  # mantissa rounds up to 1
    m, shift = fp.quantize_multiplier(0.3)
    assert (m, shift) == (1288490189, -1)
    assert fp.multiply_by_quantized_multiplier(fp.ints([1000, -1000, 5, -5]), m, shift
                                               ).tolist() == [300, -300, 2, -2]


def test_logistic_and_tanh_follow_the_functions_within_their_fixed_point():
    """Over every int16 input. gemmlowp's 16-bit functions are not monotone: where the barrel
    shifter's rounded products meet, the result steps back by up to 8 (logistic) or 16 (tanh)
    units of 2^-15, measured here; the interpreter computes the same (the tests below)."""
    a = np.arange(-2 ** 15, 2 ** 15)
    sigmoid = fp.logistic(a, 3)
    assert sigmoid[a == 0] == 2 ** 14 and sigmoid.min() >= 0 and sigmoid.max() <= 2 ** 15 - 1
    assert np.diff(sigmoid).min() == -8
    assert np.abs(sigmoid / 2 ** 15 - 1 / (1 + np.exp(-a / 2 ** 12))).max() < 7 * 2 ** -15
    for bits in range(7):
        t = fp.tanh(a, bits)
        assert t[a == 0] == 0 and np.diff(t).min() >= -16
        assert np.abs(t / 2 ** 15 - np.tanh(a / 2 ** (15 - bits))).max() < 13 * 2 ** -15, bits


# ---- the kernel against the interpreter ----------------------------------------------------

@pytest.mark.litert
def test_the_tiny_model_is_bit_exact_under_the_reference_kernels():
    pytest.importorskip("ai_edge_litert")
    model = TINY_MODEL.read_bytes()
    compared = sum(_assert_bit_exact(model, x, "BUILTIN_REF") for x in _inputs((2, 4, 2),
                                                                             range(3)))
    assert compared == 9 * 3  # QUANTIZE, the LSTM, DEQUANTIZE on each of 9 inputs


@pytest.mark.litert
def test_the_reference_reads_the_files_grids_and_integers():
    pytest.importorskip("ai_edge_litert")
    [lstm] = lstm_ops(TINY_MODEL.read_bytes())
    assert lstm.cell_exponent == -15 and lstm.cell_clip == 32767  # cell_clip 10 / 2^-15
    assert (lstm.h_scale, lstm.h_zero_point) == (lstm.hidden_scale, lstm.hidden_zero_point)
    assert lstm.W["i"].shape == (3, 2) and lstm.R["o"].shape == (3, 3)
    assert all(int(m.multiplier) >= 2 ** 30 for m in lstm.mW.values())
    # the zero points folded into the biases, as the kernel prepares them
    assert lstm.bW["f"].tolist() == (lstm.bias["f"] - lstm.x_zero_point
                                     * lstm.W["f"].sum(axis=1)).tolist()
    run = run_model(TINY_MODEL.read_bytes(), np.zeros((2, 4, 2), np.float32))
    [trace] = run.traces.values()
    assert trace["y"].shape == (2, 4, 3) and trace["c"].shape == (2, 4, 3)
    assert run.output.dtype == np.float32


def _rewired(inputs: dict[int, int]) -> bytes:
    """The tiny model with the LSTM op's inputs rewired (``{op input: tensor}``)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    m = schema.ModelT.InitFromPackedBuf(bytearray(TINY_MODEL.read_bytes()), 0)
    op = m.subgraphs[0].operators[1]
    for slot, tensor in inputs.items():
        op.inputs[slot] = tensor
    builder = flatbuffers.Builder(0)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


@pytest.mark.litert
@pytest.mark.parametrize("inputs, named", [
    ({16: 5}, "a projection (inputs 16-17)"),
    ({21: 1, 22: 2, 23: 3}, "layer normalization (inputs 20-23)"),
    ({10: 1, 11: 2}, "peepholes (inputs 9-11)"),
    ({1: -1, 5: -1, 12: -1}, "no input gate (CIFG)"),
])
def test_what_it_leaves_out_is_refused_by_name(inputs, named):
    pytest.importorskip("ai_edge_litert")
    with pytest.raises(NotModelled, match=r"op 1 UNIDIRECTIONAL_SEQUENCE_LSTM") as err:
        lstm_ops(_rewired(inputs))
    assert named in str(err.value) and "leaves it out" in str(err.value)


# ---- conversions (roads) -------------------------------------------------------------------

def _converted(case) -> tuple[bytes, list[np.ndarray]]:
    """The ``litert-int8`` adapter's conversion of ``case`` (the project's path, in a process
    of its own), and inputs: the case's own and its calibration batches."""
    from harness.adapters import get_adapter
    from harness.prepare import prepare
    from harness.quantization import calibration_inputs

    prep = prepare(case)
    adapter = get_adapter("litert-int8")
    model = adapter.convert(case, adapter.layout.to_native(prep.canonical, case,
                                                            adapter.native_dtype(case)))
    return model, [prep.inputs.x, *calibration_inputs(case)]


@pytest.fixture(scope="module")
def tiny_converted() -> tuple[bytes, list[np.ndarray]]:
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from harness.spec import Case

    return _converted(Case(name="tiny", **TINY))


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own
def test_a_fresh_conversion_is_bit_exact_under_both_op_resolvers(tiny_converted):
    model, inputs = tiny_converted
    for resolver in ("BUILTIN_REF", "BUILTIN"):
        for x in [*inputs, *_inputs((2, 4, 2), range(2))]:
            _assert_bit_exact(model, x, resolver)


@pytest.mark.litert
@pytest.mark.roads  # a conversion per case, in a process of its own
def test_every_bundled_quantized_lstm_case_is_bit_exact():
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from harness.cases import load_cases

    root = Path(__file__).resolve().parents[2] / "cases-quantized"
    cases = [c for f in sorted(root.glob("*.yaml")) for c in load_cases(f) if c.cell == "lstm"]
    checked = []
    for case in cases:
        model, inputs = _converted(case)
        for x in inputs:
            _assert_bit_exact(model, x, "BUILTIN_REF")
        checked.append(case.name)
    assert sorted(checked) == ["quantized-lstm-bidirectional", "quantized-lstm-forward",
                               "quantized-lstm-larger-weights"]
