"""``run`` on deployed files (issue 58): ``weights: {file: X.tflite | X.xml}`` reads the recurrent
layer's weights (dequantized from a quantized file), and ``shipped: {file: X}`` runs the file
itself in its runtime (``litert-shipped``, ``openvino-shipped``), judged as the others are (a
quantized file by its SQNR). The cheap files are made here: .tflite flatbuffers with LiteRT's
schema (tests/tools/_tflite_make.py), an IR built with OpenVINO's opset and saved; the
``roads`` tests convert a Keras LSTM with the real converter (float and int8)."""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
mk = pytest.importorskip("_tflite_make")

H, I = 4, 3
CASE = "cell: lstm\ninput_size: 3\nhidden_size: 4\nbatch: 2\nseq_len: 5\n"


def _weights() -> dict[str, np.ndarray]:
    return mk.weights(0, H, I)


def _run(tmp_path: Path, body: str, adapters: str) -> tuple[int, dict[str, dict], str]:
    (tmp_path / "case.yaml").write_text("name: c\n" + body)
    code = main(["run", str(tmp_path / "case.yaml"), "--adapters", adapters, "--out",
                 str(tmp_path / "out"), "--quiet", "--plots", "none"])
    report = tmp_path / "out" / "run.json"
    pairs = ({p["adapter"]: p for p in json.loads(report.read_text())["pairs"]}
             if report.exists() else {})
    return code, pairs, ""


def _error(capsys, tmp_path: Path, body: str) -> str:
    (tmp_path / "case.yaml").write_text("name: c\n" + body)
    code = main(["run", str(tmp_path / "case.yaml"), "--adapters", "reference", "--out",
                 str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("rnn-harness: error: "), err
    return err


def test_a_float_tflite_as_weights_and_shipped_passes(tmp_path) -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    (tmp_path / "m.tflite").write_bytes(mk.lstm(_weights()))
    body = CASE + "weights: {file: m.tflite}\nshipped: {file: m.tflite}\n"
    code, pairs, _ = _run(tmp_path, body, "reference,litert-shipped")
    assert code == 0
    assert {a: p["status"] for a, p in pairs.items()} == {
        "reference": "baseline", "litert-shipped": "pass"}, pairs
    assert "ran the shipped file itself" in pairs["litert-shipped"]["reason"]
    from harness.adapters import select
    from harness.cases import load_cases

    # the default selection: the case's shipped .tflite asks for its runtime's adapter alone
    chosen = {a.name for a in select(None, cases=load_cases(tmp_path / "case.yaml"))}
    assert "litert-shipped" in chosen and "openvino-shipped" not in chosen
    assert "litert-shipped" not in {a.name for a in select(None)}


@pytest.mark.parametrize("asymmetric", [False, True])
def test_a_quantized_tflite_is_judged_by_its_sqnr(tmp_path, asymmetric) -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    w = _weights()
    scales = {k: float(np.abs(v).max()) / 127 for k, v in w.items() if k[0] in "WR"}
    # dynamic range, the weights on their grids: the hybrid kernel's only other rounding is its
    # run-time quantization of x and h, per batch row, by the op's asymmetric_quantize_inputs
    (tmp_path / "q.tflite").write_bytes(mk.lstm(w, scales=scales, asymmetric=asymmetric))
    body = CASE + "weights: {file: q.tflite}\nshipped: {file: q.tflite}\n"
    code, pairs, _ = _run(tmp_path, body + "quantization: {}\n", "reference,litert-shipped")
    p = pairs["litert-shipped"]
    # the quantized judge's two questions: the kernel against the integer-aware reference on
    # the file's grids, and the cost (SQNR over y against an ideal quantization)
    assert code == 0 and p["status"] == "pass", p
    assert "of the integer-aware reference (pass within 2)" in p["reason"], p
    # the reference quantizes the activations as the kernel does: float32's rounding apart
    # (the other scheme, symmetric for asymmetric or back, is 0.27 steps off; none, 0.17)
    steps = float(re.search(r"within (\S+) output steps", p["reason"]).group(1))
    assert steps < 1e-3, p
    q = p["quantization"]  # an ideal of the same scheme: the same weights, the same kernel
    assert q["sqnr_db"] > 40 and abs(q["sqnr_db"] - q["ideal_sqnr_db"]) < 0.1, p
    if asymmetric:
        return
    code, pairs, _ = _run(tmp_path, body, "reference,litert-shipped")  # no quantization:
    p = pairs["litert-shipped"]
    assert p["status"] == "not applicable" and "is quantized (dynamic)" in p["reason"], p


def test_both_tflite_readers_declare_the_hybrid_kernels_activation_quantization() -> None:
    """A dynamic-range file's hybrid kernel quantizes x and h per batch row at run time, by the
    op's asymmetric_quantize_inputs: both readers (``compare``'s and ``run``'s layer reader, the
    litert-dynamic adapter's) say so on the QuantizedModel; a float file declares nothing."""
    from harness.frameworks import litert_flatbuffer as fb
    from harness.models.layers import read_layers
    from harness.spec import Case

    w = _weights()
    scales = {k: float(np.abs(v).max()) / 127 for k, v in w.items() if k[0] in "WR"}
    case = Case(name="c", cell="lstm", input_size=I, hidden_size=H, batch=2, seq_len=5)
    checked = 0
    for asymmetric, want in ((False, fb.HYBRID_SYMMETRIC), (True, fb.HYBRID_ASYMMETRIC)):
        model = mk.lstm(w, scales=scales, asymmetric=asymmetric)
        [layer], _ = read_layers(model, "shipped")
        assert layer.tflite.quantized.activations == want
        assert fb.quantized_model(case, model, "dynamic").activations == want
        checked += 1
    assert checked == 2
    assert (want.qmin, want.qmax, want.symmetric, want.rows) == (-128, 127, False, 1)
    assert read_layers(mk.lstm(w), "shipped")[0][0].tflite.quantized is None


def _ir(folder: Path, name: str = "m") -> Path:
    """An LSTMSequence IR (forward, batch 2, 5 steps) built with OpenVINO's opset, saved as
    ``name.xml`` and ``name.bin``."""
    pytest.importorskip("openvino")
    sys.modules.setdefault("openvino_telemetry", None)
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(1)
    f32 = np.float32
    x = ops.parameter([2, 5, I], ov.Type.f32, name="x")
    h0 = ops.constant(np.zeros((2, 1, H), f32))
    c0 = ops.constant(np.zeros((2, 1, H), f32))
    lengths = ops.constant(np.full(2, 5, np.int32))
    W = ops.constant(rng.uniform(-.5, .5, (1, 4 * H, I)).astype(f32))
    R = ops.constant(rng.uniform(-.5, .5, (1, 4 * H, H)).astype(f32))
    B = ops.constant(rng.uniform(-.5, .5, (1, 4 * H)).astype(f32))
    seq = ops.lstm_sequence(x, h0, c0, lengths, W, R, B, H, "forward")
    model = ov.Model([seq.output(0)], [x], "lstm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ov.save_model(model, str(folder / f"{name}.xml"), compress_to_fp16=False)
    return folder / f"{name}.xml"


def test_an_ir_as_weights_and_shipped_passes(tmp_path) -> None:
    _ir(tmp_path)
    code, pairs, _ = _run(tmp_path, CASE + "weights: {file: m.xml}\nshipped: {file: m.xml}\n"
                          "initial_state: random\n", "reference,openvino-shipped")
    p = pairs["openvino-shipped"]
    assert code == 0 and p["status"] == "pass", p
    assert "cut out of the IR" in p["reason"]


def test_bad_deployed_files_are_one_line_naming_file_and_field(capsys, tmp_path) -> None:
    (tmp_path / "junk.tflite").write_bytes(b"\0\0\0\0TFL3" + b"\xff" * 40)
    (tmp_path / "text.tflite").write_bytes(b"not a flatbuffer at all")
    (tmp_path / "m.tflite").write_bytes(mk.lstm(_weights()))
    (tmp_path / "noop.xml").write_text('<?xml version="1.0"?>\n<net name="n" version="11">'
                                       '<layers><layer id="0" name="x" type="Parameter" '
                                       'version="opset1"/></layers><edges/></net>\n')
    (tmp_path / "noop.bin").write_bytes(b"")
    (tmp_path / "lone.xml").write_text((tmp_path / "noop.xml").read_text())
    checked = 0
    for body, words in (
            ("weights: {file: junk.tflite}\n", ["junk.tflite", "cannot be read"]),
            ("weights: {file: text.tflite}\n", ["text.tflite", "not a TFLite flatbuffer"]),
            ("weights: {file: noop.xml}\n", ["noop.xml", "no recurrent layer"]),
            ("weights: {file: lone.xml}\n", ["lone.xml", "lone.bin is missing"]),
            ("shipped: {file: text.tflite}\n", ["text.tflite", "(shipped.file of"]),
            ("weights: {file: m.tflite, select: enc}\n",
             ["m.tflite: weights.select:", "names no recurrent layer 'enc'"])):
        err = _error(capsys, tmp_path, CASE + body)
        assert all(w in err for w in words), (words, err)
        checked += 1
    for body, words in (
            ("weights: {file: m.tflite}\n", ["m.tflite: hidden_size:", "the file holds 4, the "
                                             "case says 5", "(weights.file of"]),
            ("shipped: {file: m.tflite}\n", ["m.tflite: hidden_size:", "(shipped.file of"])):
        err = _error(capsys, tmp_path, CASE.replace("hidden_size: 4", "hidden_size: 5") + body)
        assert all(w in err for w in words), (words, err)
        checked += 1
    assert checked == 8


@pytest.mark.roads
def test_a_keras_lstm_converted_runs_as_weights_and_shipped(tmp_path) -> None:
    """A Keras LSTM converted to a float .tflite: its weights pass for keras, torch and the
    reference; the file itself passes in LiteRT; its full-integer int8 conversion is judged by
    its SQNR."""
    pytest.importorskip("ai_edge_litert.interpreter")
    mk.converted_in_child(CONVERT, tmp_path)
    body = CASE
    code, pairs, _ = _run(tmp_path, body + "weights: {file: lstm.tflite}\n"
                          "shipped: {file: lstm.tflite}\n",
                          "reference,keras,keras3,torch-cpu,litert-shipped")
    assert code == 0, pairs
    assert {a: p["status"] for a, p in pairs.items()} == {
        "reference": "baseline", "keras": "pass", "keras3": "pass", "torch-cpu": "pass",
        "litert-shipped": "pass"}, pairs
    code, pairs, _ = _run(tmp_path, body + "weights: {file: lstm_int8.tflite}\n"
                          "shipped: {file: lstm_int8.tflite}\nquantization: {}\n",
                          "reference,litert-shipped")
    p = pairs["litert-shipped"]
    assert code == 0 and p["status"] == "pass", p
    assert "int8: within" in p["reason"] and "SQNR" in p["reason"], p


CONVERT = """
import sys, numpy as np, tensorflow as tf, tf_keras as K
folder = sys.argv[1]
B, T, I, H = 2, 5, 3, 4
K.utils.set_random_seed(0)
x = K.Input(batch_shape=(B, T, I))
model = K.Model(x, K.layers.LSTM(H, return_sequences=True, name="lstm")(x))
open(folder + "/lstm.tflite", "wb").write(tf.lite.TFLiteConverter.from_keras_model(model).convert())
rng = np.random.default_rng(0)
c = tf.lite.TFLiteConverter.from_keras_model(model)
c.optimizations = [tf.lite.Optimize.DEFAULT]
c.representative_dataset = lambda: ([rng.uniform(-1, 1, (B, T, I)).astype(np.float32)]
                                    for _ in range(8))
c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
open(folder + "/lstm_int8.tflite", "wb").write(c.convert())
"""
