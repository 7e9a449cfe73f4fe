"""The ``openvino`` / ``openvino-batch-major`` adapters (the harness's ONNX graph in OpenVINO's
CPU plugin, ``layout=0`` / ``layout=1``) and ``onnx-reference`` (the same graph in
``onnx.reference``, float64), judged through ``run_pair`` like the bundled cases.

- What OpenVINO 2026.4.1 accepts was measured; what it drops silently (peepholes,
  input_forget) is not applicable, and a forced run shows it still drops it (when it stops,
  the test fails: declare the capability).
- openvinotoolkit/openvino#37820 (layout=1 ignored, the data read as time-major) reproduces
  with 2026.4.1, so openvino-batch-major is unavailable (its reason quotes OpenVINO's refusal
  of a batch-major model at the contract's sizes). Run regardless, cases/batch-major.yaml,
  whose batch, steps and directions agree, comes out DIVERGED (its declared known upstream
  bug) with where; onnx.reference runs the same batch-major graph right, so the graph is not
  the cause.
- onnx.reference's gaps (clip, activations, input_forget, sequence_lens) are checked to be
  ignored, as its not-applicable reasons say.

Weights at trained-like magnitudes (several units) besides the default scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.runnable import runnable

from harness import compare, data, params, reference
from harness.adapters import get_adapter
from harness.cases import load_cases
from harness.known_bugs import known_bug
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("onnx")

SMALL = dict(input_size=3, hidden_size=4, batch=3, seq_len=5, initial_state="random",
             dtype="float32", seed=21)
TRAINED_LIKE = dict(weights={"init": "normal", "scale": 2.5}, inputs={"init": "normal",
                                                                     "scale": 2.0})


def _forced(adapter, **caps):
    """``adapter`` with capabilities it does not declare, to see what the framework does."""
    forced = type(adapter)()
    forced.capabilities = dataclasses.replace(adapter.capabilities, **caps)
    return forced


# openvino ---------------------------------------------------------------------------------------

@pytest.mark.openvino
@pytest.mark.parametrize("kw", [
    dict(cell="lstm", bidirectional=True, num_layers=2, seq_lengths=[5, 3, 1], **TRAINED_LIKE),
    dict(cell="gru", direction="reverse", reset_after=False, gate_clip=1.5, seq_lengths=[2, 5, 4],
         **TRAINED_LIKE),
    dict(cell="gru", bidirectional=True, dtype="float16"),
], ids=["lstm-bi-L2-varlen", "gru-reverse-lbr0-clip", "gru-float16"])
def test_openvino_passes(kw):
    adapter = runnable("openvino")
    r = run_pair(prepare(Case(name="ov", **{**SMALL, **kw})), adapter)
    assert r.status == compare.PASS, (r.reason, r.worst)


@pytest.mark.openvino
def test_f32_is_pinned():
    """The CPU plugin's default here may be bf16 (it is on this project's AMD EPYC machine);
    every compiled model is f32."""
    adapter = runnable("openvino")
    from harness.adapters.openvino import COMPILE_CONFIG

    assert adapter.versions()["compile_config"] == "INFERENCE_PRECISION_HINT=f32"
    assert set(adapter.precision_flags().values()) <= {"bf16", "f16", "f32"}
    case = Case(name="pin", cell="lstm", **SMALL)
    native = adapter.layout.to_native(params.generate(case), case, np.float32)
    compiled = adapter.core().compile_model(adapter.convert(case, native, lengths=False), "CPU",
                                            COMPILE_CONFIG)
    assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == "f32"


@pytest.mark.openvino
@pytest.mark.parametrize("feature", ["peepholes", "input_forget"])
def test_silently_dropped_features_diverge_when_forced(feature):
    """OpenVINO 2026.4.1 takes P and input_forget=1 and computes as if they were absent: run
    anyway, the pair is DIVERGED from the first step, and equals the reference without them."""
    adapter = runnable("openvino")
    assert "silently" in adapter.not_applicable_reason(Case(name="n", cell="lstm",
                                                            **{feature: True}, **SMALL))
    case = Case(name="drop", cell="lstm", **{feature: True}, **SMALL, **TRAINED_LIKE)
    prep = prepare(case)
    r = run_pair(prep, _forced(adapter, **{feature: True}), step_mode="on")
    assert r.status == compare.DIVERGED
    assert (r.first_diverging["output"], r.first_diverging["t"]) in {("y", 0), ("c_n", None)}
    assert r.step_rows is not None and len(r.step_rows), "no step-local rows"
    without = reference.run(case.model_copy(update={feature: False}), prep.canonical, prep.inputs)
    assert np.abs(r.outputs.y - without.y).max() < 1e-5, (
        f"OpenVINO now honours {feature}: declare it in harness/adapters/openvino.py")


@pytest.mark.openvino
def test_hard_sigmoid_refusal_is_quoted():
    adapter = runnable("openvino")
    case = Case(name="hs", cell="gru", recurrent_activation="hard_sigmoid_keras3", **SMALL)
    assert "'Unsupported activation function'" in adapter.not_applicable_reason(case)
    r = run_pair(prepare(case), _forced(adapter, recurrent_activations=frozenset(
        {"hard_sigmoid_keras3"})))
    assert r.status == compare.ERROR and "Unsupported activation function" in r.detail


# openvino-batch-major: openvinotoolkit/openvino#37820 -----------------------------------------

def _batch_major_regardless():
    """openvino-batch-major without its availability check: the pair run as it would be."""
    from harness.adapters.openvino import OpenVINO, OpenVINOBatchMajor

    class Regardless(OpenVINOBatchMajor):
        def check_available(self) -> None:
            OpenVINO.check_available(self)

    return Regardless()


@pytest.mark.openvino
def test_batch_major_unavailable_while_layout_is_ignored():
    adapter = get_adapter("openvino-batch-major")
    runnable("openvino")
    reason = adapter.layout_ignored()
    if reason is None:  # fixed upstream: cases/batch-major.yaml's expected turns "looks fixed"
        assert adapter.unavailable_reason() is None
        return
    assert "openvino#37820" in reason and "batch_size` is not matched" in reason, reason
    assert adapter.unavailable_reason() == reason
    # run anyway, a case whose shapes disagree is refused at conversion: an error row
    r = run_pair(prepare(Case(name="bm", cell="lstm", **SMALL)), _batch_major_regardless())
    assert r.status == compare.ERROR and "batch_size` is not matched" in r.detail, r.reason


@pytest.mark.openvino
def test_batch_major_bundled_case_is_a_known_bug_with_where():
    """cases/batch-major.yaml: batch = steps = directions = 2, so OpenVINO runs the batch-major
    graph as time-major: wrong from the first step of the first layer's forward direction."""
    runnable("openvino")
    adapter = _batch_major_regardless()
    if adapter.layout_ignored() is None:
        pytest.skip("OpenVINO reads the layout attribute: the bundled case judges it")
    case = next(c for c in load_cases("cases/batch-major.yaml") if c.cell == "lstm")
    bug = known_bug(case, "openvino-batch-major", None)
    assert bug is not None and bug.upstream == "openvinotoolkit/openvino#37820"
    prep = prepare(case)
    r = run_pair(prep, adapter, step_mode="on")
    assert r.status == compare.KNOWN_BUG, r.reason
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 0, 0, 0), compare.where(f)
    assert r.worst["max_abs"] > 0.1
    # the step-local runs (one step: shapes disagree) are refused at conversion, and the pair
    # says so
    assert "step mode failed: OpConversionFailure" in r.reason, r.reason
    # the same batch-major graph in onnx.reference: right, so the graph is not the cause
    batch_major_ref = type(get_adapter("onnx-reference"))()
    batch_major_ref.onnx_layout = 1
    assert run_pair(prep, batch_major_ref).status == compare.PASS
    # and the time-major graph in OpenVINO: right
    assert run_pair(prep, get_adapter("openvino")).status == compare.PASS


# onnx-reference ---------------------------------------------------------------------------------

@pytest.mark.onnx
def test_onnx_reference_float64_peepholes_stack():
    adapter = runnable("onnx-reference")
    case = Case(name="oref", cell="lstm", peepholes=True, bidirectional=True, num_layers=2,
                **{**SMALL, "dtype": "float64"}, **TRAINED_LIKE)
    r = run_pair(prepare(case), adapter)
    assert r.status == compare.PASS and r.worst["max_abs"] < 1e-12, (r.reason, r.worst)


@pytest.mark.onnx
@pytest.mark.parametrize("cell,feature,plain", [
    ("lstm", {"gate_clip": 0.5}, {"gate_clip": None}),
    ("gru", {"recurrent_activation": "hard_sigmoid_tf_keras"}, {"recurrent_activation": "sigmoid"}),
    ("lstm", {"input_forget": True}, {"input_forget": False}),
])
def test_onnx_reference_ignores_what_it_says(cell, feature, plain):
    """Its not-applicable reasons: the attribute is taken and has no effect (the output is the
    reference's without it, which is far from the reference's with it)."""
    adapter = runnable("onnx-reference")
    case = Case(name="gap", cell=cell, **feature, **SMALL, **TRAINED_LIKE)
    assert "ignore" in adapter.not_applicable_reason(case)
    canonical, inputs = params.generate(case), data.generate(case)
    out = adapter._run(case, adapter.layout.to_native(canonical, case), inputs)
    without = reference.run(case.model_copy(update=plain), canonical, inputs).y
    assert np.abs(out.y - without).max() < 1e-12
    assert np.abs(reference.run(case, canonical, inputs).y - without).max() > 0.05


@pytest.mark.onnx
def test_onnx_reference_ignores_sequence_lens():
    adapter = runnable("onnx-reference")
    case = Case(name="len", cell="gru", bidirectional=True, **{**SMALL, "seq_lengths": [5, 2, 1]})
    assert "sequence_lens" in adapter.not_applicable_reason(case)
    canonical, inputs = params.generate(case), data.generate(case)
    native = adapter.layout.to_native(canonical, case)
    full = dataclasses.replace(inputs, seq_lengths=None)
    with_lengths, without = adapter._run(case, native, inputs), adapter._run(case, native, full)
    np.testing.assert_array_equal(with_lengths.y, without.y)
