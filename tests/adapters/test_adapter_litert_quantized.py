"""The quantized LiteRT adapters and their yardstick (harness/quantization.py,
docs/quantization.md).

Conversions cost tens of seconds on a busy 2-core machine: one here, in the child process the
adapters use. One full-integer LSTM (tiny), shared by ``litert-int8``, ``litert-int8-ref`` and
the planted bugs (the adapters keep the last conversion in the process); ``litert-dynamic`` on
the same tiny LSTM is not applicable (its weights are too small for the converter to quantize:
tests/adapters/test_litert_dynamic_small.py). The rest needs no conversion: the child that dies
by a signal, the 16x8 refusal (the converter's words, measured), the yardstick's pieces.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from support.quantized_mutants import CATALOGUE, PlantedInt8
from support.runnable import runnable

from harness import compare, grids, known_bugs, quantization
from harness.adapters import _litert_convert, get_adapter, litert_quantized
from harness.adapters.litert_quantized import LiteRTInt16x8
from harness.errors import KnownCrashGone, KnownUpstreamCrash, NotApplicable
from harness.frameworks import litert_flatbuffer
from harness.pairs import run_pair
from harness.params import Canonical
from harness.prepare import prepare
from harness.reference import run as reference_run
from harness.spec import Case

QUANTIZED = ("litert-int8", "litert-int8-ref", "litert-dynamic", "litert-int16x8")
TINY = dict(cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5,
            dtype="float32", quantization={"calibration_batches": 4},
            adapters=[*QUANTIZED, *(PlantedInt8(bug).name for bug in CATALOGUE)])


@pytest.fixture(scope="module")
def prep():
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    return prepare(Case(name="q-lstm", **TINY))


@pytest.fixture(scope="module")
def int8(prep):
    return run_pair(prep, runnable("litert-int8"))


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own: the nightly's
def test_int8_kernel_passes_within_steps_with_its_cost(int8):
    assert int8.status == compare.PASS, (int8.reason, int8.detail)
    assert "QUANTIZE, UNIDIRECTIONAL_SEQUENCE_LSTM, DEQUANTIZE" in int8.reason
    assert "integer tensors in the recurrent ops: INT16, INT32, INT8" in int8.reason
    y = int8.rows[int8.rows["output"] == "y"]
    assert y["sqnr_db"].notna().all() and y["cosine"].between(0.9, 1.0).all()
    assert (y["rmse_steps"] > 0).all()  # quantization costs something
    assert "output steps" in int8.reason and "SQNR" in int8.reason


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own: the nightly's
def test_int8_ref_runs_the_reference_kernels_and_is_reported_in_steps(prep, int8):
    ref = run_pair(prep, runnable("litert-int8-ref"))
    assert ref.status == compare.PASS, (ref.reason, ref.detail)
    assert "BUILTIN_REF op resolver" in ref.reason
    # the two kernels in the same unit (output steps) against the same reference
    step = int8.rows["atol"].iloc[0] / (quantization.K_STEPS + quantization.READ_BACK_STEPS)
    between = np.max(np.abs(int8.outputs.y - ref.outputs.y)) / step
    assert between <= quantization.K_STEPS
    assert f"BUILTIN vs BUILTIN_REF kernels: {between:.3g} output steps apart" in ref.reason
    assert f"BUILTIN_REF vs default kernels: {between:.3g} output steps apart" in int8.reason
    # judged to the bit against the integer reference (harness/judges/bit_exact.py)
    assert ref.reason.startswith("bit-exact: every output value equals the integer reference's")
    assert "bit-exact" not in int8.reason


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own: the nightly's
@pytest.mark.parametrize("bug", list(CATALOGUE))
def test_planted_quantization_bugs_diverge(prep, int8, bug):
    """Each with the clean adapter's conversion: only the kernel's reading is wrong, and
    litert-int8-ref, where they are planted, is judged to the bit."""
    r = run_pair(prep, PlantedInt8(bug))
    assert r.status == compare.DIVERGED, (bug, r.reason)
    assert "not bit-exact against the integer reference" in r.reason


@pytest.mark.litert
@pytest.mark.roads  # a conversion a case, five mutants each: minutes
def test_every_planted_bug_is_killed_on_every_bundled_quantized_lstm_case():
    from support.quantized_mutants import kill_rate

    killed, planted, failed, lines = kill_rate()
    # the bidirectional case's clean pair is the finding its case declares (a known upstream
    # bug), bit-exact against the integer reference all the same
    counted = [ln for ln in lines if " clean: " in ln and "bit-exact: every" in ln]
    assert len(counted) * len(CATALOGUE) == planted and len(counted) == 3, lines
    assert (killed, failed) == (planted, 0), lines


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own: the nightly's
def test_h_fed_back_unquantized_diverges_where_the_recurrence_carries_it():
    """The recurrent h fed back unquantized differs from the clean kernel by its half-step
    residual, seen only where larger weights carry it across an output rounding: on the
    bundled case with such weights the clean kernel passes and that mutant is DIVERGED
    (docs/quantization.md, "Planted quantization bugs", measures how rarely)."""
    from harness.cases import load_cases

    root = Path(__file__).resolve().parents[2]
    [case] = load_cases(root / "cases-quantized" / "quantized-lstm-larger-weights.yaml")
    named = prepare(case.model_copy(update={"adapters": ["litert-int8-ref",
                                                          PlantedInt8("h-unquantized").name]}))
    clean = run_pair(named, runnable("litert-int8-ref"))
    assert clean.status == compare.PASS, clean.reason
    mutant = run_pair(named, PlantedInt8("h-unquantized"))
    assert mutant.status == compare.DIVERGED, mutant.reason


def test_a_converter_killed_by_a_signal_is_named(tmp_path):
    die = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    with pytest.raises(_litert_convert.ConversionDied, match="died with SIGSEGV") as caught:
        _litert_convert.convert_in_child(tmp_path, die)
    assert caught.value.signal_name == signal.Signals.SIGSEGV.name


def test_the_gru_conversion_crash_is_a_registry_entry_of_each_adapter_it_kills(monkeypatch):
    """The registry's crash entry, with the converter's death planted (no conversion): the row
    names the signal and tensorflow#87468, status known upstream bug; where the converter
    converts the model instead, the pair looks fixed; an LSTM is not claimed."""
    gru = Case(name="g", **{**TINY, "cell": "gru"})
    for name in ("litert-int8", "litert-int8-ref", "litert-int16x8"):
        entry = known_bugs.known_crash(gru, name, "SIGSEGV")
        assert entry is not None and entry.upstream == "tensorflow/tensorflow#87468"
        assert entry.since == {"tensorflow": "2.21.0"}
        assert known_bugs.known_crash(Case(name="l", **TINY), name, "SIGSEGV") is None
    assert known_bugs.known_crash(gru, "litert-dynamic", "SIGSEGV") is None

    def dies(folder, command=None):
        raise _litert_convert.ConversionDied("the converter's process died with SIGSEGV",
                                             "SIGSEGV")

    monkeypatch.setattr(_litert_convert, "convert_in_child", dies)
    monkeypatch.setattr(litert_quantized, "deployed_model", lambda *a, **k: _Saveable())
    monkeypatch.setattr(litert_quantized, "import_tf_keras", lambda: (_NoTf(), None))
    adapter = get_adapter("litert-int8")
    with pytest.raises(KnownUpstreamCrash, match="died with SIGSEGV converting to int8") as got:
        adapter.convert(gru, {"w": np.zeros(1)})
    assert got.value.upstream == "tensorflow/tensorflow#87468"
    monkeypatch.setattr(_litert_convert, "convert_in_child", lambda folder, command=None: b"m")
    with pytest.raises(KnownCrashGone, match=r"looks fixed \(tensorflow [0-9.]+\); revisit its "
                                             r"entry"):
        adapter.convert(gru, {"w": np.ones(1)})


class _NoTf:
    """What the adapter asks of TensorFlow around a save (no TensorFlow import)."""

    @staticmethod
    def device(name):
        import contextlib

        return contextlib.nullcontext()

    @staticmethod
    def get_logger():
        import logging

        return logging.getLogger("tensorflow")


class _Saveable:
    def save(self, *args, **kwargs) -> None:
        pass


def test_16x8_refusal_is_not_applicable_quoting_the_converter():
    # the converter's words (TensorFlow 2.21), as the child process writes them
    said = ("RuntimeError: Quantization to 16x8-bit not yet supported for op: "
            "'UNIDIRECTIONAL_SEQUENCE_LSTM'.")
    made = LiteRTInt16x8().refused(_litert_convert.ConversionRefused(said))
    assert isinstance(made, NotApplicable)
    assert said in str(made) and "tensorflow/tensorflow#59626" in str(made)


def test_only_quantized_cases_run_them():
    plain = Case(name="plain", **{**TINY, "quantization": None})
    for name in QUANTIZED:
        assert "no quantization: key" in get_adapter(name).not_applicable_reason(plain)
    assert get_adapter("litert-dynamic").not_applicable_reason(
        Case(name="gru", **{**TINY, "cell": "gru"})).startswith("TFLite has no fused GRU op")


def test_the_integer_reference_with_no_grids_is_the_reference():
    case = Case(name="q", **TINY)
    prep = prepare(case)
    model = grids.QuantizedModel("int8", dict(prep.canonical.tensors))
    got = quantization.integer_reference(case, model, prep.inputs)
    np.testing.assert_array_equal(got.y, reference_run(case, prep.canonical, prep.inputs).y)


def test_an_ideal_quantization_is_judged_within_steps_and_near_its_cost():
    """The harness's own quantization as the adapter's output: within 0 steps of itself, its
    SQNR is the ideal's; the same outputs judged with 1.5 x the weights' scale cost more."""
    case = Case(name="q", **{**TINY, "hidden_size": 8, "seq_len": 6})
    prep = prepare(case)
    ideal = quantization.ideal_model(case, prep.canonical, "int8")
    out = quantization.integer_reference(case, ideal, prep.inputs)
    out.h_n, out.c_n = None, None
    got = quantization.judge(case, "ideal", out, ideal, prep.inputs, prep.canonical,
                             prep.reference)
    assert got.status == compare.PASS, got.reason
    assert got.sqnr_db == pytest.approx(got.ideal_sqnr_db)
    wrong = Canonical({k: v * 1.5 if k.rsplit("/", 1)[1].startswith("W_") else v
                       for k, v in ideal.weights.items()})
    bad = grids.QuantizedModel("int8", wrong.tensors, ideal.grids, ideal.output)
    out = quantization.integer_reference(case, bad, prep.inputs)
    out.h_n, out.c_n = None, None
    judged = quantization.judge(case, "scales", out, bad, prep.inputs, prep.canonical,
                                prep.reference)
    # the kernel agrees with its own file; the cost gives it away
    assert judged.rows["tol_ratio"].max() == 0
    assert judged.status == compare.DIVERGED and "more than an ideal" in judged.reason


def test_grids_round_as_tflite_declares_them():
    g = quantization.int8_grid(-0.25, 0.5)
    assert g.scale == pytest.approx(0.75 / 255) and -128 <= g.zero_point <= 127
    assert g.round(np.array([0.0]))[0] == 0.0  # zero is on the grid
    assert g.round(np.array([9.0]))[0] == pytest.approx((127 - g.zero_point) * g.scale)
    c = quantization.int16_pow2_grid(0.7)
    assert c.scale == 2.0 ** -15  # a range of 1: the power of two over 0.7


@pytest.mark.litert
@pytest.mark.roads  # a conversion in a process of its own: the nightly's
def test_bidirectional_int8_names_the_converters_conflicting_grids(capfd):
    """The bidirectional int8 model gives the concatenation's grid to a REVERSE_V2 output (which
    copies bytes) and to the forward LSTM's output: the pair's reason says where, read from the
    file (docs/quantization.md). The conversion prints nothing on the terminal."""
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    case = Case(name="q-bi", **{**TINY, "bidirectional": True, "hidden_size": 4})
    bi = prepare(case)
    capfd.readouterr()
    r = run_pair(bi, runnable("litert-int8"))
    said = capfd.readouterr()
    assert said.out == "" and said.err == "", said
    assert r.status in compare.COMPARED, (r.reason, r.detail)
    assert "REVERSE_V2" in r.reason and "CONCATENATION" in r.reason
    conflicts = litert_flatbuffer.grid_conflicts(r.outputs.models["tflite"])
    for line in conflicts:
        assert line in r.reason
    assert any("REVERSE_V2 copies bytes" in line for line in conflicts), conflicts
