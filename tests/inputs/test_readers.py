"""Weights files as people have them: Keras 2.x weights-only HDF5 (told apart by shapes, as
tf_keras's loader does), nn.LSTMCell / nn.GRUCell state dicts, and files refused with one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.errors import WeightsError
from harness.readers import read_native
from harness.spec import Case

h5py = pytest.importorskip("h5py")


def _keras2_weights_h5(path: Path, layer: str, tensors: dict[str, np.ndarray]) -> None:
    """What Keras 2.1/2.2's ``save_weights`` wrote: a group per layer whose ``weight_names``
    are ``layer/kernel:0`` (no ``_cell`` scope, no model config), CuDNN layers named alike."""
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [layer.encode()]
        g = f.create_group(layer)
        names = [f"{layer}/{k}:0" for k in tensors]
        g.attrs["weight_names"] = [n.encode() for n in names]
        for n, a in zip(names, tensors.values(), strict=True):
            g.create_dataset(n, data=a)


def _tensors(H: int, I: int, G: int, bias_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"kernel": rng.normal(size=(I, G * H)),
            "recurrent_kernel": rng.normal(size=(H, G * H)),
            "bias": rng.normal(size=bias_shape)}


@pytest.mark.parametrize("cell,G,bias_shape,layout", [
    ("lstm", 4, (16,), "keras"),
    ("lstm", 4, (32,), "keras-cudnn"),
    ("gru", 3, (12,), "keras"),
    ("gru", 3, (2, 12), "keras"),
    ("gru", 3, (24,), "keras-cudnn"),
])
def test_keras2_weights_only_h5_is_told_apart_by_its_bias(tmp_path, cell, G, bias_shape, layout):
    path = tmp_path / "w.h5"
    tensors = _tensors(4, 3, G, bias_shape)
    _keras2_weights_h5(path, "rnn_1", tensors)
    case = Case(name="r", cell=cell, input_size=3, hidden_size=4, reset_after=bias_shape == (2, 12))
    native, _ = read_native(path, layout, case)
    assert set(native) == set(tensors)
    for k, a in tensors.items():
        np.testing.assert_array_equal(native[k], a)
    other = "keras" if layout == "keras-cudnn" else "keras-cudnn"
    with pytest.raises(WeightsError, match=f"layout '{layout}', not '{other}'"):
        read_native(path, other, case)


def test_keras2_h5_with_a_bias_of_no_known_shape_is_refused(tmp_path):
    path = tmp_path / "w.h5"
    _keras2_weights_h5(path, "lstm_1", _tensors(4, 3, 4, (20,)))
    with pytest.raises(WeightsError, match="bias of shape \\[20\\]") as err:
        read_native(path, "keras", Case(name="r", cell="lstm", input_size=3, hidden_size=4))
    assert err.value.field == "lstm_1"


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_torch_cell_state_dict_reads_as_one_layer_that_reproduces_the_cell(tmp_path, cell):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    rnn_cell = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell}[cell](3, 5).double()
    path = tmp_path / "cell.pt"
    torch.save({"encoder." + k: v for k, v in rnn_cell.state_dict().items()}, path)
    case = Case(name="r", cell=cell, input_size=3, hidden_size=5)
    native, notes = read_native(path, "torch", case)
    assert set(native) == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    assert any("LSTMCell" in n for n in notes)
    # the tensors, loaded into a one-layer nn.LSTM/GRU, give the cell's outputs step by step
    layer = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell](3, 5, batch_first=True).double()
    layer.load_state_dict({k: torch.from_numpy(v) for k, v in native.items()})
    x = torch.randn(2, 4, 3, dtype=torch.float64)
    with torch.no_grad():
        y, _ = layer(x)
        state = None
        for t in range(4):
            state = rnn_cell(x[:, t], state)
            h = state[0] if cell == "lstm" else state
            np.testing.assert_allclose(y[:, t].numpy(), h.numpy(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("make,match", [
    (lambda torch: torch.randn(8, 3, dtype=torch.complex64), "real floating-point"),
    (lambda torch: torch.eye(8, 3).to_sparse(), "dense tensor"),
    (lambda torch: torch.ones(8, 3, dtype=torch.int64), "real floating-point"),
])
def test_torch_tensors_that_would_lose_values_are_refused(tmp_path, make, match):
    torch = pytest.importorskip("torch")
    path = tmp_path / "w.pt"
    torch.save({"weight_ih_l0": make(torch)}, path)
    with pytest.raises(WeightsError, match=match) as err:
        read_native(path, "torch", Case(name="r", cell="lstm", input_size=3, hidden_size=2))
    assert err.value.field == "weight_ih_l0"


def _h5(path: Path, build) -> Path:
    with h5py.File(path, "w") as f:
        build(f)
    return path


def _missing_group(f):
    f.attrs["layer_names"] = [b"lstm_1"]


def _config_a_list(f):
    f.attrs["layer_names"] = [b"lstm_1"]
    f.attrs["model_config"] = "[1, 2]"
    g = f.create_group("lstm_1")
    g.attrs["weight_names"] = [b"lstm_1/kernel:0", b"lstm_1/recurrent_kernel:0",
                               b"lstm_1/bias:0"]
    g.create_dataset("lstm_1/kernel:0", data=np.zeros((3, 8)))
    g.create_dataset("lstm_1/recurrent_kernel:0", data=np.zeros(8))
    g.create_dataset("lstm_1/bias:0", data=np.zeros(8))


def _missing_dataset(f):
    f.attrs["layer_names"] = [b"lstm_1"]
    g = f.create_group("lstm_1")
    g.attrs["weight_names"] = [b"lstm_1/kernel:0", b"lstm_1/recurrent_kernel:0",
                               b"lstm_1/bias:0"]
    g.create_dataset("lstm_1/kernel:0", data=np.zeros((3, 8)))


def _one_d_recurrent_kernel(f):
    _missing_dataset(f)
    g = f["lstm_1"]
    g.create_dataset("lstm_1/recurrent_kernel:0", data=np.zeros(8))
    g.create_dataset("lstm_1/bias:0", data=np.zeros(8))


@pytest.mark.parametrize("name,write", [
    ("missing-group.h5", lambda p: _h5(p, _missing_group)),
    ("config-a-list.h5", lambda p: _h5(p, _config_a_list)),
    ("missing-dataset.h5", lambda p: _h5(p, _missing_dataset)),
    ("one-d-recurrent.h5", lambda p: _h5(p, _one_d_recurrent_kernel)),
    ("garbage.h5", lambda p: p.write_bytes(b"not hdf5 at all")),
    ("garbage.keras", lambda p: p.write_bytes(b"PK\x03\x04 not a zip")),
    ("garbage.onnx", lambda p: p.write_bytes(b"\x08\x07garbage" * 10)),
    ("garbage.pt", lambda p: p.write_bytes(b"\x80\x04garbage")),
])
def test_malformed_files_are_refused_in_one_line_naming_the_file(tmp_path, name, write):
    path = tmp_path / name
    write(path)
    with pytest.raises(WeightsError) as err:
        read_native(path, "onnx" if name.endswith(".onnx") else
                    "torch" if name.endswith(".pt") else "keras",
                    Case(name="r", cell="lstm", input_size=3, hidden_size=2))
    assert Path(err.value.file) == path
    assert "\n" not in str(err.value)


def test_a_file_larger_than_the_memory_limit_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.h5"
    path.write_bytes(b"\0" * 4096)
    with pytest.raises(WeightsError, match="memory limit"):
        read_native(path, "keras", Case(name="r", cell="lstm", input_size=3, hidden_size=2),
                    max_bytes=1024)


# Optional tensors: ONNX's B / P / sequence_lens / initial_h, BlockLSTM's zero peepholes ---------

def _onnx_case(**kw) -> Case:
    return Case(name="o", cell=kw.pop("cell", "lstm"), input_size=3, hidden_size=4, batch=3,
                seq_len=5, **kw)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_onnx_model_without_b_reads_as_zero_biases_and_reproduces_the_node(tmp_path, cell):
    """A node with only X, W, R (ONNX: B = zeros): read, its canonical weights give ORT's
    outputs through the reference."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from harness import reference
    from harness.data import Inputs
    from harness.layouts import get_layout

    case = _onnx_case(cell=cell)
    G, H, I = len(case.gates), case.hidden_size, case.input_size
    rng = np.random.default_rng(1)
    W = rng.normal(size=(1, G * H, I)).astype(np.float32)
    R = rng.normal(size=(1, G * H, H)).astype(np.float32)
    outs = ["Y", "Y_h"] + (["Y_c"] if cell == "lstm" else [])
    node = helper.make_node(cell.upper(), ["X", "W", "R"], outs, hidden_size=H,
                            **({"linear_before_reset": 0} if cell == "gru" else {}))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [5, 3, I])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(R, "R")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    case = case.model_copy(update={"reset_after": False}) if cell == "gru" else case
    native, notes = read_native(path, "onnx", case)
    assert any("has no B: zeros" in n for n in notes)
    canonical = get_layout("onnx").from_native(native, case)
    x = rng.normal(size=(3, 5, I))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(["Y"], {"X": x.transpose(1, 0, 2).astype(np.float32)})
    zeros = np.zeros((1, 3, H))
    ref = reference.run(case, canonical, Inputs(x, zeros, zeros if cell == "lstm" else None,
                                                None))
    np.testing.assert_allclose(ref.y, y[:, 0].transpose(1, 0, 2), atol=1e-5)


def _npz_case(tmp_path: Path, layout: str, native: dict[str, np.ndarray], **kw) -> Case:
    from harness.spec import TensorFile

    path = tmp_path / "w.npz"
    np.savez(path, **native)
    return _onnx_case(**kw).model_copy(update={"weights": TensorFile(file=str(path),
                                                                     layout=layout)})


def test_onnx_npz_takes_the_operators_defaults_and_refuses_non_defaults(tmp_path):
    from harness import params
    from harness.layouts import get_layout
    from harness.prepare import load_weights

    case = _onnx_case()
    full = get_layout("onnx").to_native(params.generate(case), case)
    W_R = {k: full[k] for k in ("W", "R")}
    got = load_weights(_npz_case(tmp_path, "onnx", W_R))  # no B: zeros
    assert not any(np.any(v) for k, v in got.tensors.items() if "/b" in k)
    with_defaults = W_R | {"B": full["B"], "P": np.zeros((1, 12)), "initial_h": np.zeros((1, 3, 4)),
                           "initial_c": np.zeros((1, 3, 4)),
                           "sequence_lens": np.array([5, 5, 5], dtype=np.int32)}
    load_weights(_npz_case(tmp_path, "onnx", with_defaults))
    peep = _npz_case(tmp_path, "onnx", W_R, peepholes=True)  # P absent: zeros
    assert not np.any(load_weights(peep).tensors["layer0/forward/p_i"])
    for name, value in (("P", np.ones((1, 12))), ("initial_h", np.ones((1, 3, 4))),
                        ("sequence_lens", np.array([1, 5, 3]))):
        with pytest.raises(WeightsError, match="holds") as err:
            load_weights(_npz_case(tmp_path, "onnx", with_defaults | {name: value}))
        assert err.value.field == name and "\n" not in str(err.value)


@pytest.mark.parametrize("layout", ["tf-block", "tf-block-v2"])
def test_blocklstm_dump_with_zero_peepholes_reads_for_a_case_without_them(tmp_path, layout):
    from harness import params
    from harness.layouts import get_layout
    from harness.prepare import load_weights

    case = _onnx_case()
    canonical = params.generate(case)
    native = get_layout(layout).to_native(canonical, case)
    dump = native | {n: np.zeros(4) for n in ("wci", "wcf", "wco")}
    got = load_weights(_npz_case(tmp_path, layout, dump))
    ref = load_weights(_npz_case(tmp_path, layout, native))
    for k in ref.tensors:
        np.testing.assert_array_equal(got.tensors[k], ref.tensors[k])
    with pytest.raises(WeightsError, match="non-zero values, but the case has no peepholes") as err:
        load_weights(_npz_case(tmp_path, layout, dump | {"wcf": np.full(4, 0.5)}))
    assert err.value.field == "wcf"


def test_a_damaged_pt_file_says_so_in_whole_sentences(tmp_path):
    """A truncated archive is named as damaged (not as the legacy format); a member damaged
    inside a whole archive gets torch's own message, in whole sentences, never one cut off in
    the middle."""
    torch = pytest.importorskip("torch")
    torch.save(torch.nn.LSTM(2, 3).state_dict(), tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError) as err:
        read_native(tmp_path / "cut.pt", "torch", Case(name="c", cell="lstm", input_size=2,
                                                     hidden_size=3))
    assert "cut.pt: a damaged torch.save file" in str(err.value)
    damaged = bytearray(data)
    start = data.index(b"PK\x03\x04", 100)  # the second member's header: the archive stays whole
    damaged[start + 30: start + 90] = b"\0" * 60
    (tmp_path / "bad.pt").write_bytes(bytes(damaged))
    with pytest.raises(WeightsError) as err:
        read_native(tmp_path / "bad.pt", "torch", Case(name="c", cell="lstm", input_size=2,
                                                     hidden_size=3))
    message = str(err.value)
    assert "bad.pt: cannot load with torch.load(weights_only=True)" in message, message
    assert message.endswith(".") and "..." not in message, message
