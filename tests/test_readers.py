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
