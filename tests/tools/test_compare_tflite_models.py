"""``rnn-harness compare`` on ``.tflite`` files whose layer sits inside a larger model, and on
the ``WHILE`` loop the converter emits for a Keras GRU (issue 58). The cheap tests use
flatbuffers made with LiteRT's schema (tests/tools/_tflite_make.py: an LSTM behind a TANH, a GRU
loop body that is not run); the ``roads`` tests convert tf_keras models with TensorFlow's
converter."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import PASS
from harness.models.layers import read_layers

sys.path.insert(0, str(Path(__file__).parent))
mk = pytest.importorskip("_tflite_make")

H, I = 4, 3


def _weights() -> dict[str, np.ndarray]:
    return mk.weights(0, H, I)


def test_an_lstm_inside_a_larger_tflite_runs_cut_out_and_on_the_data_through_the_file() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    w = _weights()
    original, shipped = mk.lstm(w), mk.lstm(w, lead="TANH")
    result = harness.compare_models(original, shipped)
    [p] = result.pairings
    assert bool(result) and p.outputs.status == PASS
    assert "cut out as a one-op .tflite" in p.outputs.reason
    x = np.random.default_rng(1).uniform(-2, 2, (2, 5, I))
    result = harness.compare_models(original, shipped, inputs=x)
    [p] = result.pairings
    assert bool(result) and p.outputs.status == PASS
    assert "the data run through the shipped .tflite up to the op" in p.outputs.reason
    # the layer's inputs are the file's TANH activations, not the data
    np.testing.assert_allclose(p.outputs.figures.inputs.x, np.tanh(x), atol=1e-6)


CONVERT = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf, tf_keras as K
    folder = sys.argv[1]
    B, T, I, H = 2, 5, 3, 4
    rng = np.random.default_rng(0)
    K.utils.set_random_seed(0)
    x = K.Input(batch_shape=(B, T, I))
    # Dense weights in [-1, 1]: the calibrated cell state then needs a scale LiteRT's int8
    # kernel takes (2^-15 or coarser); a finer one (2^-16) the kernel's tanh cannot read
    dense = K.layers.Dense(6, name="dense",
                           kernel_initializer=K.initializers.RandomUniform(-1, 1, seed=0))
    model = K.Model(x, K.layers.LSTM(H, return_sequences=True, name="lstm")(dense(x)))
    model.save(folder + "/dense_lstm.h5")
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([rng.uniform(-1, 1, (B, T, I)).astype(np.float32)]
                                        for _ in range(8))
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    open(folder + "/dense_lstm_int8.tflite", "wb").write(c.convert())
    np.save(folder + "/x.npy", rng.uniform(-1, 1, (B, T, I)).astype(np.float32))
    x = K.Input(batch_shape=(B, T, I))
    # biases not zero: the converter drops a zero bias from the loop body's FULLY_CONNECTED
    layer = K.layers.GRU(H, reset_after=True, return_sequences=True, name="gru",
                         bias_initializer=K.initializers.RandomUniform(-.5, .5, seed=1))
    gru = K.Model(x, layer(x))
    gru.save(folder + "/gru.h5")
    open(folder + "/gru.tflite", "wb").write(
        tf.lite.TFLiteConverter.from_keras_model(gru).convert())
""")


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[Path, float]:
    """A tf_keras Dense -> LSTM model and its full-integer int8 .tflite, data for it (x.npy),
    and a tf_keras GRU (reset_after) and its float .tflite (the WHILE form), converted in a
    process of its own (:func:`_tflite_make.converted_in_child`), and the seconds it took."""
    folder = tmp_path_factory.mktemp("compare-tflite-models")
    return folder, mk.converted_in_child(CONVERT, folder)


@pytest.mark.roads
def test_dense_lstm_keras_model_against_its_int8_tflite(converted, capsys) -> None:
    folder, _ = converted
    original, shipped = str(folder / "dense_lstm.h5"), str(folder / "dense_lstm_int8.tflite")
    assert main(["compare", original, shipped]) == 0
    out = capsys.readouterr().out
    assert "pass (litert; SQNR " in out
    assert main(["compare", original, shipped, "--inputs", str(folder / "x.npy")]) == 0
    assert "pass (litert; SQNR " in capsys.readouterr().out
    [p] = harness.compare_models(original, shipped).pairings
    assert p.original.path == "lstm"  # the LSTM layer pairs with the op; Dense is no RNN
    assert "cut out as a one-op .tflite" in p.outputs.reason
    [p] = harness.compare_models(original, shipped, inputs=folder / "x.npy").pairings
    assert p.outputs.status == PASS
    assert "the data run through the shipped .tflite up to the op" in p.outputs.reason


@pytest.mark.roads
def test_keras_gru_against_its_float_tflite_while_loop(converted, capsys) -> None:
    folder, seconds = converted
    start = time.perf_counter()
    assert main(["compare", str(folder / "gru.h5"), str(folder / "gru.tflite")]) == 0
    out = capsys.readouterr().out
    assert "| op 1 WHILE | gru        | GRU I=3 H=4 forward | pass      | pass" in out
    assert seconds + time.perf_counter() - start <= 60  # conversions included
    [p] = harness.compare_models(folder / "gru.h5", folder / "gru.tflite").pairings
    assert (p.shipped.case.batch, p.shipped.case.seq_len) == (2, 5)
    assert p.shipped.case.reset_after
    assert p.weights.status == PASS and p.outputs.status == PASS
    assert p.outputs.figures.adapter == "litert"


def test_a_keras_gru_while_loop_is_read_as_its_gru_and_any_other_body_is_bad_input(
        tmp_path, capsys) -> None:
    rng = np.random.default_rng(2)
    Wx, Wh = rng.uniform(-.5, .5, (3 * H, I)), rng.uniform(-.5, .5, (3 * H, H))
    bx, bh = rng.uniform(-.5, .5, 3 * H), rng.uniform(-.5, .5, 3 * H)
    [[layer]] = [read_layers(mk.gru_loop(Wx, Wh, bx, bh), "shipped")[0]]
    assert layer.sizes == "GRU I=3 H=4 forward" and layer.case.reset_after
    blocks = {"z": slice(0, H), "r": slice(H, 2 * H), "n": slice(2 * H, 3 * H)}  # Keras's
    checked = 0
    for g, rows in blocks.items():
        for name, value in (("W", Wx[rows]), ("R", Wh[rows]), ("bW", bx[rows]),
                            ("bR", bh[rows])):
            np.testing.assert_allclose(layer.canonical[f"layer0/forward/{name}_{g}"], value,
                                       rtol=1e-6)
            checked += 1
    assert checked == 12
    path = tmp_path / "not_a_gru.tflite"
    path.write_bytes(mk.gru_loop(Wx, Wh, bx, bh, candidate="RELU"))
    (tmp_path / "a.tflite").write_bytes(mk.lstm(_weights()))
    assert main(["compare", str(tmp_path / "a.tflite"), str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a WHILE loop whose body holds GATHER, FULLY_CONNECTED" in err[0]
    assert "RELU" in err[0]
