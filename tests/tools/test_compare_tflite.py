"""``rnn-harness compare`` on ``.tflite`` files (issue 58): the fused LSTM op read as canonical
parameters with each weight's grid, quantized weights within half a step of their own grid, the
file run as it is in the LiteRT interpreter, a WHILE loop named as not readable. The cheap tests
use flatbuffers made with LiteRT's schema (tests/tools/_tflite_make.py); the ``roads`` tests
convert a Keras LSTM with TensorFlow's converter (float and full-integer int8)."""

from __future__ import annotations

import struct
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import DIVERGED, PASS
from harness.models.judges.weights import WEIGHTS
from harness.models.layers import read_layers

sys.path.insert(0, str(Path(__file__).parent))
mk = pytest.importorskip("_tflite_make")

H, I = 4, 3


def _weights() -> dict[str, np.ndarray]:
    return mk.weights(0, H, I)


def _scales(w: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: float(np.abs(v).max()) / 127 for k, v in w.items() if k[0] in "WR"}


def test_a_float_tflite_is_read_run_in_litert_and_the_same_as_itself(tmp_path) -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    model = mk.lstm(_weights())
    (tmp_path / "a.tflite").write_bytes(model)
    result = harness.compare_models(model, tmp_path / "a.tflite")  # bytes and a path
    [p] = result.pairings
    assert bool(result) and p.agreed
    assert p.shipped.sizes == "LSTM I=3 H=4 forward"
    assert (p.shipped.case.batch, p.shipped.case.seq_len) == (2, 5)
    assert p.weights.status == PASS and p.outputs.status == PASS
    assert p.outputs.figures.adapter == "litert"


def test_quantized_weights_within_half_a_step_pass_and_a_scale_edited_names_the_tensor() -> None:
    w = _weights()
    original = read_layers(mk.lstm(w), "original")[0][0]
    fine = read_layers(mk.lstm(w, scales=_scales(w)), "shipped")[0][0]
    bad = read_layers(mk.lstm(w, scales=_scales(w),
                               declared={"W_f": _scales(w)["W_f"] * 1.25}), "shipped")[0][0]
    v = WEIGHTS.judge(original, fine)
    assert v.status == PASS and "half a step of its own grid" in v.reason
    v = WEIGHTS.judge(original, bad)
    assert v.status == DIVERGED
    assert "forward/W_f (input_to_forget_weights" in v.reason
    assert "scale 1.25x what its values need" in v.reason
    assert "W_i" not in v.reason


def test_a_while_loop_is_bad_input_naming_its_ops(tmp_path, capsys) -> None:
    path = tmp_path / "gru.tflite"
    path.write_bytes(mk.while_loop(["FULLY_CONNECTED", "LOGISTIC", "TANH", "MUL"]))
    (tmp_path / "a.tflite").write_bytes(mk.lstm(_weights()))
    assert main(["compare", str(tmp_path / "a.tflite"), str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert str(path) in err[0]
    assert "a WHILE loop whose body holds FULLY_CONNECTED, LOGISTIC, TANH, MUL" in err[0]


CONVERT = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf, tf_keras as K
    folder = sys.argv[1]
    B, T, I, H = 2, 5, 3, 4
    K.utils.set_random_seed(0)
    x = K.Input(batch_shape=(B, T, I))
    model = K.Model(x, K.layers.LSTM(H, return_sequences=True, name="lstm")(x))
    model.save(folder + "/lstm.h5")
    rng = np.random.default_rng(0)
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([rng.uniform(-1, 1, (B, T, I)).astype(np.float32)]
                                        for _ in range(8))
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    open(folder + "/lstm_int8.tflite", "wb").write(c.convert())
""")


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, float]:
    """A y-only tf_keras LSTM (lstm.h5) and its full-integer int8 .tflite, converted in a
    process of its own (:func:`_tflite_make.converted_in_child`), and the seconds it took."""
    folder = tmp_path_factory.mktemp("compare-tflite")
    return folder, mk.converted_in_child(CONVERT, folder)


@pytest.mark.roads
def test_keras_lstm_against_its_int8_tflite(converted, capsys) -> None:
    folder, seconds = converted
    start = time.perf_counter()
    assert main(["compare", str(folder / "lstm.h5"), str(folder / "lstm_int8.tflite")]) == 0
    out = capsys.readouterr().out
    assert "pass (litert; SQNR " in out and " dB, ideal " in out
    assert seconds + time.perf_counter() - start <= 60  # two small files, conversion included
    result = harness.compare_models(folder / "lstm.h5", folder / "lstm_int8.tflite")
    assert "bit-exact against the integer reference of LiteRT's int8 LSTM kernel" in \
        result.pairings[0].outputs.reason


def _scale_edited(folder: Path, tmp_path: Path) -> Path:
    """The converter's int8 file with W_f's scale edited to 1.25x in the flatbuffer."""
    from harness.frameworks import litert_flatbuffer as fb

    data = bytearray((folder / "lstm_int8.tflite").read_bytes())
    flat = fb.read(bytes(data))
    [op] = [o for o in flat.ops if o.name == fb.FUSED_LSTM]
    scale = float(flat.subgraph.tensors[op.inputs[2]].quantization.scale[0])  # W_f
    old = struct.pack("<f", scale)
    assert data.count(old) == 1
    at = data.index(old)
    data[at:at + 4] = struct.pack("<f", np.float32(scale * 1.25))
    (tmp_path / "bad.tflite").write_bytes(bytes(data))
    return tmp_path / "bad.tflite"


@pytest.mark.roads
def test_int8_tflite_with_a_weight_scale_edited_exits_1_naming_it(converted, tmp_path,
                                                                    capsys) -> None:
    folder, _ = converted
    bad = _scale_edited(folder, tmp_path)
    assert main(["compare", str(folder / "lstm.h5"), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "forward/W_f (input_to_forget_weights" in out
    assert "scale 1.25x what its values need" in out


@pytest.mark.roads
def test_the_reproducer_script_exits_1_on_the_scale_edited_int8_file_and_0_on_the_clean(
        converted, tmp_path) -> None:
    import subprocess

    from harness.models.repro import write_repro

    folder, _ = converted
    assert main(["compare", str(folder / "lstm.h5"), str(_scale_edited(folder, tmp_path)),
                 "--out", str(tmp_path / "r")]) == 1
    # the clean file's pairing is the same: compare writes it no reproducer; its writer does
    [clean] = harness.compare_models(folder / "lstm.h5", folder / "lstm_int8.tflite").pairings
    write_repro(clean, tmp_path / "clean", tmp_path)
    runs = {}
    for name, repro in (("edited", tmp_path / "r" / "repro-0"), ("clean", tmp_path / "clean")):
        assert sorted(f.name for f in repro.iterdir()) == ["data.npz", "model.tflite",
                                                           "repro.py"]
        runs[name] = subprocess.run([sys.executable, "repro.py"], cwd=repro,
                                    capture_output=True, text=True, timeout=120)
    assert runs["edited"].returncode == 1, runs["edited"].stdout + runs["edited"].stderr
    assert "scale 1.25x what its values need  DIFFERS" in runs["edited"].stdout
    assert "quantization costs" in runs["edited"].stdout
    assert runs["clean"].returncode == 0, runs["clean"].stdout + runs["clean"].stderr
    assert "an ideal int8 quantization" in runs["clean"].stdout
