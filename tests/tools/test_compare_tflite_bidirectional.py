"""``rnn-harness compare`` on a Keras ``Bidirectional(LSTM)`` converted to ``.tflite``: the
converter writes two fused LSTM ops (the backward one between two REVERSE_V2s on the time axis,
joined by CONCATENATION), read as one bidirectional layer that pairs with the Keras original,
its weights judged per direction and its outputs run in LiteRT. The cheap tests use flatbuffers
made with LiteRT's schema (tests/tools/_tflite_make.py); the ``roads`` test converts a tf_keras
Bidirectional(LSTM) with TensorFlow's converter."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import PASS
from harness.params import key

sys.path.insert(0, str(Path(__file__).parent))
mk = pytest.importorskip("_tflite_make")

H, I = 4, 3


def _weights(seed: int) -> dict[str, np.ndarray]:
    return mk.weights(seed, H, I)


def test_two_fused_lstms_around_reverse_v2_are_one_bidirectional_layer_run_in_litert() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    fw, bw = _weights(0), _weights(1)
    result = harness.compare_models(mk.bidirectional(fw, bw), mk.bidirectional(fw, bw))
    [p] = result.pairings
    assert bool(result) and p.agreed
    assert p.shipped.sizes == "LSTM I=3 H=4 bidirectional"
    assert p.weights.status == PASS and p.outputs.status == PASS
    assert "ran the shipped file itself" in p.outputs.reason
    # LiteRT's run agrees with the reference on the weights read: each op's direction is right
    names = p.shipped.file_names
    assert names[key(0, 1, "W_f")].startswith("backward input_to_forget_weights (tensor ")
    # swapped directions: the weights judge sees them
    [q] = harness.compare_models(mk.bidirectional(fw, bw), mk.bidirectional(bw, fw)).pairings
    assert "forward and backward weights are swapped" in q.weights.reason


def test_a_bidirectional_layer_inside_a_larger_model_runs_its_ops_cut_out() -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    fw, bw = _weights(0), _weights(1)
    [p] = harness.compare_models(mk.bidirectional(fw, bw),
                                 mk.bidirectional(fw, bw, lead=True)).pairings
    assert p.agreed and p.outputs.status == PASS
    assert "ran the shipped file's ops [4, 1, 2, 3, 5] cut out as a .tflite" in p.outputs.reason


def test_a_bidirectional_pair_merged_by_add_is_bad_input_naming_its_ops(tmp_path,
                                                                       capsys) -> None:
    fw, bw = _weights(0), _weights(1)
    (tmp_path / "a.tflite").write_bytes(mk.bidirectional(fw, bw))
    (tmp_path / "sum.tflite").write_bytes(mk.bidirectional(fw, bw, merge="ADD"))
    assert main(["compare", str(tmp_path / "a.tflite"), str(tmp_path / "sum.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "op 3 UNIDIRECTIONAL_SEQUENCE_LSTM and op 1 UNIDIRECTIONAL_SEQUENCE_LSTM" in err[0]
    assert "read by ADD (op 4): not joined by one CONCATENATION" in err[0]


CONVERT = textwrap.dedent("""
    import sys, tensorflow as tf, tf_keras as K
    folder = sys.argv[1]
    B, T, I, H = 2, 5, 3, 4
    K.utils.set_random_seed(0)
    x = K.Input(batch_shape=(B, T, I))
    y = K.layers.Bidirectional(K.layers.LSTM(H, return_sequences=True), name="bi")(x)
    model = K.Model(x, y)
    model.save(folder + "/bi.h5")
    open(folder + "/bi.tflite", "wb").write(tf.lite.TFLiteConverter.from_keras_model(model)
                                            .convert())
""")


@pytest.mark.roads
def test_keras_bidirectional_pairs_with_its_tflite_and_an_edited_backward_weight_exits_1(
        tmp_path, capsys) -> None:
    from harness.frameworks import litert_flatbuffer as fb

    mk.converted_in_child(CONVERT, tmp_path)
    h5, shipped = tmp_path / "bi.h5", tmp_path / "bi.tflite"
    assert main(["compare", str(h5), str(shipped)]) == 0
    assert "| pass (litert" in capsys.readouterr().out
    [p] = harness.compare_models(h5, shipped).pairings
    assert p.shipped.sizes == "LSTM I=3 H=4 bidirectional"
    assert p.weights.status == PASS and "ran the shipped file itself" in p.outputs.reason
    # the backward op's input-to-forget weights, one value moved by 0.25
    data = bytearray(shipped.read_bytes())
    flat = fb.read(bytes(data))
    [bwd] = [o for o in flat.ops if o.name == fb.FUSED_LSTM and fb.reversed_by(flat, o)]
    old = flat.stored(bwd.inputs[2])
    new = old.copy()
    new[0, 0] += np.float32(0.25)
    assert data.count(old.tobytes()) == 1
    at = data.index(old.tobytes())
    data[at:at + old.nbytes] = new.tobytes()
    (tmp_path / "bad.tflite").write_bytes(bytes(data))
    assert main(["compare", str(h5), str(tmp_path / "bad.tflite")]) == 1
    out = capsys.readouterr().out
    assert "1 of 32 blocks differ (backward/W_f;" in out
    assert "first diverges at y L0 d1" in out  # the backward direction's output


def test_the_state_grids_come_from_the_ops_own_state_inputs() -> None:
    """An op's h and c states are inputs 18 and 19 of a fused LSTM (35-38 of a bidirectional
    one); their tensors are numbered however the converter numbered them. A file whose c state
    is not the tensor after the h state still gets each state's own grid."""
    from harness.models.layers import read_layers

    w = {**{f"W_{g}": np.full((4, 3), 0.25) for g in "ifgo"},
         **{f"R_{g}": np.full((4, 4), 0.5) for g in "ifgo"},
         **{f"b_{g}": np.zeros(4) for g in "ifgo"}}
    model = mk.schema.ModelT.InitFromPackedBuf(
        mk.lstm(w, scales={k: 0.01 for k in w if k[0] in "WR"}), 0)
    sg = model.subgraphs[0]
    op = sg.operators[0]
    h, c = int(op.inputs[18]), int(op.inputs[19])
    op.inputs = [*op.inputs[:18], c, h, *op.inputs[20:]]  # h the later tensor: no c after it
    for t, scale, kind in ((c, 0.5, "INT8"), (h, 2.0 ** -11, "INT16")):  # h's grid, c's grid
        q = mk.schema.QuantizationParametersT()
        q.scale, q.zeroPoint = [scale], [0]
        sg.tensors[t].quantization = q
        sg.tensors[t].type = getattr(mk.schema.TensorType, kind)
    [layer], _ = read_layers(mk._pack(model), "shipped")
    grids = layer.tflite.quantized.grids["0/0"]
    assert (grids.h.scale, grids.c.scale) == (0.5, 2.0 ** -11)
