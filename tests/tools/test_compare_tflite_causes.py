"""``rnn-harness compare`` on ``.tflite`` files: what explains a quantized file's outputs (the
grids it declares for one set of integers, a cell state grid the int8 kernel saturates or cannot
compute on) named in the outputs verdict's reason, and a Keras ``go_backwards`` LSTM (a fused
op behind a REVERSE_V2 on the time axis) read as direction reverse. The cheap tests use
flatbuffers made with LiteRT's schema (tests/tools/_tflite_make.py); the ``roads`` test converts
tf_keras models with TensorFlow's converter."""

from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import DIVERGED, PASS
from harness.grids import Grid
from harness.models.layers import read_layers

sys.path.insert(0, str(Path(__file__).parent))
mk = pytest.importorskip("_tflite_make")

H, I = 4, 3


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    return mk.weights(seed, H, I)


def _scales(w: dict[str, np.ndarray]) -> dict[str, float]:
    return {k: float(np.abs(v).max()) / 127 for k, v in w.items() if k[0] in "WR"}


# -- a go_backwards LSTM -------------------------------------------------------------------

def test_a_go_backwards_lstm_is_read_as_reverse_and_run_in_input_time_order(tmp_path,
                                                                            capsys) -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    w = _weights()
    files = {(back, lead): mk.go_backwards(w, back=back, lead=lead)
             for back in (False, True) for lead in (False, True)}
    plain = files[(False, False)]
    checked = 0
    for (back, lead), model in files.items():
        [layer], _ = read_layers(model, "shipped")
        assert layer.sizes == "LSTM I=3 H=4 reverse", (back, lead)
        assert "layer0/backward/W_f" in layer.canonical.tensors
        assert layer.tflite.whole == (not lead)
        # against the y-in-reading-order form itself: the run and the reference agree on
        # which step is which, however the file is run (as it is, or the op cut out)
        [p] = harness.compare_models(plain, model).pairings
        assert p.agreed and p.weights.status == PASS and p.outputs.status == PASS, \
            (back, lead, p.outputs.reason)
        checked += 1
    assert checked == 4
    # a forward LSTM of the same weights is another layer: not paired with it
    (tmp_path / "forward.tflite").write_bytes(mk.lstm(w))
    (tmp_path / "back.tflite").write_bytes(plain)
    assert main(["compare", str(tmp_path / "forward.tflite"), str(tmp_path / "back.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(LSTM I=3 H=4 reverse) has no layer of the same cell" in err[0]
    assert "LSTM I=3 H=4 forward" in err[0]


def test_a_reverse_v2_off_the_time_axis_is_bad_input_naming_the_ops(tmp_path, capsys) -> None:
    (tmp_path / "a.tflite").write_bytes(mk.lstm(_weights()))
    (tmp_path / "off.tflite").write_bytes(mk.go_backwards(_weights(), axis=2))
    assert main(["compare", str(tmp_path / "a.tflite"), str(tmp_path / "off.tflite")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert ("op 1 UNIDIRECTIONAL_SEQUENCE_LSTM reads its input through the REVERSE_V2 op 0: "
            "the REVERSE_V2 op 0 is not on the time axis (1)") in err[0]


# -- the cell state's grid -----------------------------------------------------------------

def _driven_weights() -> dict[str, np.ndarray]:
    """Gates open and a cell input near 1 on x = 1: c grows by about 0.9 a step."""
    w = {**{f"W_{g}": np.full((H, I), 0.5) for g in "ifgo"},
         **{f"R_{g}": np.zeros((H, H)) for g in "ifgo"},
         **{f"b_{g}": np.full(H, 2.0) for g in "ifgo"}}
    w["R_f"] = np.full((H, H), 0.01)  # a recurrent weight of each kind is not all zero
    w["R_i"] = w["R_g"] = w["R_o"] = w["R_f"]
    return w


def _c_reach(w: dict[str, np.ndarray], x: np.ndarray) -> float:
    """max |c| of a float64 LSTM (TFLite gate order i, f, g, o; zero states) on x [B, T, I]."""
    def sig(a):
        return 1 / (1 + np.exp(-a))

    h = c = np.zeros((x.shape[0], H))
    reach = 0.0
    for t in range(x.shape[1]):
        z = {g: x[:, t] @ w[f"W_{g}"].T + h @ w[f"R_{g}"].T + w[f"b_{g}"] for g in "ifgo"}
        c = sig(z["f"]) * c + sig(z["i"]) * np.tanh(z["g"])
        h = sig(z["o"]) * np.tanh(c)
        reach = max(reach, float(np.abs(c).max()))
    return reach


def test_a_cell_state_grid_the_kernel_saturates_or_cannot_compute_on_is_named() -> None:
    from harness.data import generate
    from harness.models.judges.tflite_causes import cell_state_causes
    from harness.models.tflite_run import zero_states

    w = _driven_weights()
    [layer], _ = read_layers(mk.lstm(w, scales=_scales(w)), "shipped")
    op = layer.tflite
    inputs = zero_states(generate(layer.case))
    inputs = replace(inputs, x=np.ones_like(inputs.x))
    stored = {k: op.quantized.weights[f"layer0/forward/{k.replace('b_', 'bW_')}"]
              for k in w}
    reach = _c_reach(stored, inputs.x)
    assert reach > 2.0

    def causes(c: Grid) -> list[str]:
        grids = {"0/0": replace(op.quantized.grids["0/0"], c=c)}
        return cell_state_causes(replace(op, quantized=replace(op.quantized, grids=grids)),
                                 layer.case, inputs)

    fine = causes(Grid(2.0 ** -16, 0, -32768, 32767))
    assert len(fine) == 2, fine
    assert fine[0].startswith("c state of op 0: scale 2^-16 is outside 2^-15 .. 2^-9")
    assert fine[1].startswith(f"c state of op 0: scale 2^-16 saturates at ±0.5; c reaches "
                              f"{reach:.3g} on these inputs (")
    assert causes(Grid(2.0 ** -11, 0, -32768, 32767)) == []  # ±16: c stays inside
    [odd] = causes(Grid(3e-4, 0, -32768, 32767))
    assert odd == ("c state of op 0: scale 0.0003 is not a power of two, as LiteRT's int8 "
                   "LSTM kernel requires of it")
    assert cell_state_causes(replace(op, quantized=None), layer.case, inputs) == []


# -- grids declared twice ------------------------------------------------------------------

def _with_hidden_intermediate(model: bytes, scale: float) -> bytes:
    """The fused LSTM op given the five intermediate tensors of the 8x8->16 kernel, its hidden
    one (the fifth: where h is written) on an int8 grid of ``scale``."""
    m = mk.schema.ModelT.InitFromPackedBuf(model, 0)
    sg = m.subgraphs[0]
    [op] = sg.operators
    added = []
    for k in range(5):
        t = mk.schema.TensorT()
        t.shape, t.name = [1], f"intermediate_{k}".encode()
        t.type = mk.schema.TensorType.INT8 if k == 4 else mk.schema.TensorType.INT16
        q = mk.schema.QuantizationParametersT()
        q.scale, q.zeroPoint = [scale if k == 4 else 2.0 ** -12], [0]
        t.quantization, t.buffer = q, 0
        sg.tensors.append(t)
        added.append(len(sg.tensors) - 1)
    op.intermediates = added
    return mk._pack(m)


def test_the_files_grid_conflicts_are_named_in_the_outputs_reason(tmp_path) -> None:
    pytest.importorskip("ai_edge_litert.interpreter")
    from harness.frameworks.litert_flatbuffer import grid_conflict_words

    w = _weights()
    shipped = _with_hidden_intermediate(mk.lstm(w, scales=_scales(w)), 0.01)
    words = grid_conflict_words(shipped)
    assert words.startswith("the converter declared two grids for one set of integers where "
                            "no op requantizes: op 0 UNIDIRECTIONAL_SEQUENCE_LSTM writes h on "
                            "scale 0.01 zero point 0, reads it back on float")
    [p] = harness.compare_models(mk.lstm(w), shipped).pairings
    assert words in p.outputs.reason, p.outputs.reason
    (tmp_path / "a.tflite").write_bytes(mk.lstm(w))
    (tmp_path / "b.tflite").write_bytes(shipped)
    main(["compare", str(tmp_path / "a.tflite"), str(tmp_path / "b.tflite"), "--out",
          str(tmp_path / "r")])
    [line] = [ln for ln in (tmp_path / "r" / "compare.md").read_text().splitlines()
              if ln.startswith("- outputs (litert): ")]
    assert words in line  # the report's outputs line
    # a file without them says nothing of them
    [p] = harness.compare_models(mk.lstm(w), mk.lstm(w, scales=_scales(w))).pairings
    assert "two grids" not in p.outputs.reason


# -- real conversions ----------------------------------------------------------------------

CONVERT = textwrap.dedent("""
    import sys, numpy as np, tensorflow as tf, tf_keras as K
    folder = sys.argv[1]
    B, T, I, H = 2, 5, 3, 4
    rng = np.random.default_rng(0)
    K.utils.set_random_seed(0)
    x = K.Input(batch_shape=(B, T, I))
    model = K.Model(x, K.layers.LSTM(H, return_sequences=True, name="lstm")(x))
    model.save(folder + "/lstm.h5")
    # calibrated on sequences that are zero past their first step: the input's grid spans the
    # run's inputs, the cell state's is fit to one step of them (a fine power of two)
    def first_step_only():
        for _ in range(8):
            x = np.zeros((B, T, I), np.float32)
            x[:, 0] = rng.uniform(-1, 1, (B, I))
            yield [x]
    c = tf.lite.TFLiteConverter.from_keras_model(model)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = first_step_only
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    open(folder + "/small_calibration.tflite", "wb").write(c.convert())
    x = K.Input(batch_shape=(B, T, I))
    back = K.Model(x, K.layers.LSTM(H, return_sequences=True, go_backwards=True,
                                    name="back")(x))
    back.save(folder + "/back.h5")
    open(folder + "/back.tflite", "wb").write(
        tf.lite.TFLiteConverter.from_keras_model(back).convert())
""")


@pytest.mark.roads
def test_converted_files_a_fine_cell_grid_named_and_go_backwards_pairs(tmp_path) -> None:
    from harness.frameworks import litert_flatbuffer as fb

    mk.converted_in_child(CONVERT, tmp_path)
    [p] = harness.compare_models(tmp_path / "lstm.h5",
                                 tmp_path / "small_calibration.tflite").pairings
    flat = fb.read((tmp_path / "small_calibration.tflite").read_bytes())
    [n] = [k for k, o in enumerate(flat.ops) if o.name == fb.FUSED_LSTM]
    scale = flat.grid(flat.ops[n].inputs[fb.C_STATE]).scale
    assert scale < 2.0 ** -15  # the converter's calibration, measured
    assert p.outputs.status == DIVERGED, p.outputs.reason
    assert f"c state of op {n}: scale 2^{round(np.log2(scale))} " in p.outputs.reason
    assert " saturates at ±" in p.outputs.reason
    [q] = harness.compare_models(tmp_path / "back.h5", tmp_path / "back.tflite").pairings
    assert q.shipped.sizes == "LSTM I=3 H=4 reverse"
    assert q.agreed and q.outputs.status == PASS, q.outputs.reason
