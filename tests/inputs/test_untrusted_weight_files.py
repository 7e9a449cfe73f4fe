"""Weight files from strangers (issue 31): nothing read from outside the files given, work bounded
by the memory limit before reading, one line with exit code 2 for every malformed file, and
overflows named rather than warned about.

Each test plants one attack (HDF5 external storage, external links and virtual datasets made
with h5py, zip bombs) and checks the line, the exit code and that no byte of the planted outside
file reaches an output or the error line."""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support.bad_input import GOOD
from support.bad_input import one_line_without_secret as one_line
from support.bad_input import plant_secret as _secret
from support.cli import cli

from harness.errors import WeightsError
from harness.readers import read_native
from harness.spec import Case

h5py = pytest.importorskip("h5py")

I, H = 2, 3


def _keras2_h5(f, make_kernel) -> None:
    """A Keras 2 ``save_weights`` file of one LSTM layer (I=2, H=3) whose kernel
    ``make_kernel(group, name)`` creates."""
    f.attrs["layer_names"] = [b"lstm_1"]
    g = f.create_group("lstm_1")
    names = [f"lstm_1/{n}:0" for n in ("kernel", "recurrent_kernel", "bias")]
    g.attrs["weight_names"] = [n.encode() for n in names]
    make_kernel(g, names[0])
    g.create_dataset(names[1], data=np.zeros((H, 4 * H)))
    g.create_dataset(names[2], data=np.zeros(4 * H))


def _external_storage(secret: Path):
    def make(g, name):  # the kernel's bytes are the outside file's (I x 4H float64 = 192 bytes)
        g.create_dataset(name, shape=(I, 4 * H), dtype="<f8",
                         external=[(str(secret), 0, I * 4 * H * 8)])
    return make


def _external_link(other: Path):
    def make(g, name):
        with h5py.File(other, "w") as o:
            o.create_dataset("k", data=np.full((I, 4 * H), 7.0))
        g[name] = h5py.ExternalLink(str(other), "/k")
    return make


def _virtual(other: Path):
    def make(g, name):
        with h5py.File(other, "w") as o:
            o.create_dataset("k", data=np.full((I, 4 * H), 7.0))
        layout = h5py.VirtualLayout(shape=(I, 4 * H), dtype="<f8")
        layout[:] = h5py.VirtualSource(str(other), "k", shape=(I, 4 * H))
        g.create_virtual_dataset(name, layout)
    return make


def _planted_h5(tmp_path: Path, kind: str) -> Path:
    secret = _secret(tmp_path)
    make = {"external-storage": _external_storage(secret),
            "external-link": _external_link(tmp_path / "outside" / "other.h5"),
            "virtual": _virtual(tmp_path / "outside" / "other.h5")}[kind]
    path = tmp_path / f"{kind}.h5"
    with h5py.File(path, "w") as f:
        _keras2_h5(f, make)
    return path


def _as_keras_zip(h5: Path) -> Path:
    """A Keras 3 ``.keras`` zip whose weights member is ``h5`` rebuilt in Keras 3's groups."""
    buf = io.BytesIO()
    with h5py.File(h5, "r") as src, h5py.File(buf, "w") as f:
        v = f.create_group("layers/lstm/cell/vars")
        for i, n in enumerate(("kernel", "recurrent_kernel", "bias")):
            link = src["lstm_1"].get(f"lstm_1/{n}:0", getlink=True)
            if isinstance(link, h5py.ExternalLink):
                v[str(i)] = h5py.ExternalLink(link.filename, link.path)
                continue
            ds = src["lstm_1"][f"lstm_1/{n}:0"]
            if ds.external:
                v.create_dataset(str(i), shape=ds.shape, dtype=ds.dtype, external=ds.external)
            elif ds.is_virtual:
                layout = h5py.VirtualLayout(shape=ds.shape, dtype=ds.dtype)
                m = ds.virtual_sources()[0]
                layout[:] = h5py.VirtualSource(m.file_name, m.dset_name, shape=ds.shape)
                v.create_virtual_dataset(str(i), layout)
            else:
                v.create_dataset(str(i), data=ds[()])
    config = {"class_name": "Sequential", "config": {"layers": [
        {"class_name": "LSTM", "config": {"name": "lstm", "recurrent_activation": "sigmoid"}}]}}
    path = h5.with_suffix(".keras")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", buf.getvalue())
    return path


# 1. HDF5 that reads from outside the file --------------------------------------------------------

@pytest.mark.parametrize("kind, words", [
    ("external-storage", "external raw storage"),
    ("external-link", "external link"),
    ("virtual", "virtual dataset"),
])
@pytest.mark.parametrize("container", ["h5", "keras"])
def test_hdf5_reading_from_outside_the_file_is_refused(kind, words, container, tmp_path, capsys):
    path = _planted_h5(tmp_path, kind)
    if container == "keras":
        path = _as_keras_zip(path)
    out = tmp_path / "leak.npz"
    # without --case (sizes read from the file), with --case, and through doctor --weights
    code, err = cli(["convert", "--to", "keras", str(path), str(out)], capsys)
    one_line(code, err, str(path), words, "kernel" if container == "h5" else "vars/0")
    assert not out.exists()
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    code, err = cli(["convert", "--case", str(case), "--from", "keras", "--to", "torch",
                     str(path), str(out)], capsys)
    one_line(code, err, str(path), words)
    code, err = cli(["doctor", "--case", str(case), "--weights", str(path), "--layout", "keras",
                     "--adapter", "torch-cpu"], capsys)
    one_line(code, err, str(path), words)
    assert not out.exists()


# 8. Declared sizes checked against the memory limit before reading -------------------------------

def test_a_keras_zip_whose_weights_inflate_past_the_limit_is_refused(tmp_path, capsys,
                                                                     monkeypatch):
    path = tmp_path / "bomb.keras"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("config.json", "{}")
        z.writestr("model.weights.h5", b"\0" * (8 << 20))
    assert path.stat().st_size < 100_000
    monkeypatch.setenv("RNN_HARNESS_MAX_MEMORY", "1MiB")
    code, err = cli(["convert", "--to", "keras", str(path), str(tmp_path / "o.npz")], capsys)
    one_line(code, err, str(path), "inflates to", "memory limit")


def test_an_unwritten_chunked_hdf5_dataset_is_refused_from_its_declared_size(tmp_path, capsys,
                                                                            monkeypatch):
    path = tmp_path / "sparse.h5"
    with h5py.File(path, "w") as f:
        _keras2_h5(f, lambda g, name: g.create_dataset(name, shape=(20000, 8000), dtype="<f4",
                                                       chunks=(100, 100)))
    assert path.stat().st_size < 50_000
    monkeypatch.setenv("RNN_HARNESS_MAX_MEMORY", "100MiB")
    code, err = cli(["convert", "--to", "keras", str(path), str(tmp_path / "o.npz")], capsys)
    one_line(code, err, str(path), "declares datasets of", "memory limit", "kernel")
    with pytest.raises(WeightsError, match="memory limit"):
        read_native(path, "keras", Case(name="c", cell="lstm", input_size=I, hidden_size=H),
                    max_bytes=100 << 20)


def test_a_torch_zip_that_inflates_past_the_limit_is_refused(tmp_path):
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", b"\0" * (8 << 20))
    with pytest.raises(WeightsError, match="inflates to .* memory limit") as err:
        read_native(path, "torch", Case(name="c", cell="lstm", input_size=I, hidden_size=H),
                    max_bytes=1 << 20)
    assert err.value.file == str(path)


# 10. convert without --case: one line for every malformed file ----------------------------------

def _onnx_file(path: Path, *, attrs: dict | None = None, inputs=("X", "W", "R"),
               W: object = "data", external: bool = False) -> Path:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    attrs = {"hidden_size": H} if attrs is None else attrs
    node = helper.make_node("LSTM", list(inputs), ["Y"], name="lstm", **attrs)
    inits = [numpy_helper.from_array(np.zeros((1, 4 * H, H), np.float32), "R")]
    if W == "data":
        inits.append(numpy_helper.from_array(np.zeros((1, 4 * H, I), np.float32), "W"))
    else:  # declared dims, no data
        inits.append(TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 4 * H, I]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [1, 1, I])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph)
    if external:  # a tensor whose bytes are said to be in a file outside the model's folder
        from onnx.external_data_helper import set_external_data

        t = model.graph.initializer[0]
        set_external_data(t, location="../outside/credentials", offset=0, length=4 * 12 * H)
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        t.ClearField("float_data")
    path.write_bytes(model.SerializeToString())
    return path


def _pt(path: Path, **tensors) -> Path:
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}, path)
    return path


def _bad_h5_key(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"lstm_1"]  # no such group: KeyError
    return path


def _bad_keras_json(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", "{not json")
        z.writestr("model.weights.h5", b"")
    return path


def _bad_h5_config(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"lstm_1"]
        f.attrs["model_config"] = "{not json"
    return path


@pytest.mark.parametrize("name, make, words", [
    ("garbage.onnx", lambda p: p.write_bytes(b"\x08\x07garbage" * 10) and p,
     "not a readable ONNX"),
    ("external.onnx", lambda p: _onnx_file(p, external=True), "external data"),
    ("no-hidden.onnx", lambda p: _onnx_file(p, attrs={}), "hidden_size"),
    ("no-weights.onnx", lambda p: _onnx_file(p, inputs=("X",)), "no W and R"),
    ("no-data.onnx", lambda p: _onnx_file(p, W="nodata"), "not a readable .onnx"),
    ("one-d.pt", lambda p: _pt(p, weight_ih_l0=np.zeros(8), weight_hh_l0=np.zeros(8)),
     "weight_ih_l0: expected a matrix"),
    ("zero-width.pt", lambda p: _pt(p, weight_ih_l0=np.zeros((0, 2)),
                                    weight_hh_l0=np.zeros((0, 0))), "expected a matrix"),
    ("key.h5", _bad_h5_key, "not a readable .h5"),
    ("config.h5", _bad_h5_config, "not a readable .h5"),
    ("json.keras", _bad_keras_json, "not a readable .keras"),
])
def test_convert_without_case_gives_one_line_for_malformed_files(name, make, words, tmp_path,
                                                                 capsys):
    _secret(tmp_path)
    path = make(tmp_path / name)
    code, err = cli(["convert", "--to", "torch", str(path), str(tmp_path / "o.npz")], capsys)
    one_line(code, err, str(path), words)


# 7, 12. convert's output ---------------------------------------------------------------------

def _torch_npz(path: Path, scale: float = 1.0) -> Path:
    rng = np.random.default_rng(0)
    np.savez(path, weight_ih_l0=rng.uniform(-1, 1, (4 * H, I)) * scale,
             weight_hh_l0=rng.uniform(-1, 1, (4 * H, H)), bias_ih_l0=np.zeros(4 * H),
             bias_hh_l0=np.zeros(4 * H))
    return path


def test_convert_refuses_to_replace_its_input(tmp_path, capsys, monkeypatch):
    w = _torch_npz(tmp_path / "w.npz")
    before = w.read_bytes()
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    (tmp_path / "link.npz").symlink_to(w)
    monkeypatch.chdir(tmp_path)
    for out in (str(w), "./w.npz", str(tmp_path / "link.npz"), "sub/../w.npz"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        code, err = cli(["convert", "--case", str(case), "--from", "torch", "--to", "torch",
                         str(w), out], capsys)
        one_line(code, err, "is the input file")
    assert w.read_bytes() == before


def test_convert_into_missing_folders_or_onto_a_folder(tmp_path, capsys):
    w = _pt(tmp_path / "w.pt", weight_ih_l0=np.zeros((4 * H, I), np.float32),
            weight_hh_l0=np.zeros((4 * H, H), np.float32), bias_ih_l0=np.zeros(4 * H, np.float32),
            bias_hh_l0=np.zeros(4 * H, np.float32))
    out = tmp_path / "nodir" / "sub" / "out.pt"
    code, err = cli(["convert", str(w), str(out)], capsys)
    assert code == 0 and out.is_file(), err  # made like an .npz output's folder
    assert [p.name for p in out.parent.iterdir()] == ["out.pt"]  # no temporary file left
    (tmp_path / "folder.pt").mkdir()
    code, err = cli(["convert", str(w), str(tmp_path / "folder.pt")], capsys)
    one_line(code, err, "folder.pt: is a folder")
    (tmp_path / "afile").write_text("x")
    code, err = cli(["convert", str(w), str(tmp_path / "afile" / "out.pt")], capsys)
    one_line(code, err, "out.pt: cannot write")


# 11. bfloat16 overflow -------------------------------------------------------------------------

def test_weights_that_overflow_bfloat16_are_one_line(tmp_path, capsys):
    _torch_npz(tmp_path / "w.npz", scale=1e39)
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + "dtype: bfloat16\nweights: {file: w.npz, layout: torch}\n")
    code, err = cli(["run", str(case), "--out", str(tmp_path / "r"), "--adapters", "reference"],
                    capsys)
    one_line(code, err, "w.npz", "overflow", "bfloat16")
    assert not (tmp_path / "r").exists()


# 16. Warnings -----------------------------------------------------------------------------------

def test_a_malformed_pt_file_warns_nothing(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "w.pt"
    path.write_bytes(b"\x80\x04garbage")  # torch.load: "Detected pickle protocol 4" UserWarning
    with warnings.catch_warnings(), pytest.raises(WeightsError, match="cannot load"):
        warnings.simplefilter("error")
        read_native(path, "torch", Case(name="c", cell="lstm", input_size=I, hidden_size=H))


def test_a_framework_file_that_would_overflow_float32_is_one_line(tmp_path, capsys):
    w = _torch_npz(tmp_path / "w.npz", scale=1e300)
    case = tmp_path / "c.yaml"
    case.write_text(GOOD.replace("lstm\n", "lstm\ndtype: float64\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, err = cli(["convert", "--case", str(case), "--from", "torch", str(w),
                         str(tmp_path / "o.pt")], capsys)
    one_line(code, err, "o.pt", "overflow", "float32")


def test_a_summed_bias_that_overflows_float16_warns_nothing(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w = tmp_path / "w.npz"
    np.savez(w, weight_ih_l0=rng.uniform(-1, 1, (4 * H, I)).astype(np.float16),
             weight_hh_l0=rng.uniform(-1, 1, (4 * H, H)).astype(np.float16),
             bias_ih_l0=np.full(4 * H, 60000, np.float16),
             bias_hh_l0=np.full(4 * H, 60000, np.float16))
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, err = cli(["convert", "--case", str(case), "--from", "torch", "--to", "keras",
                         str(w), str(tmp_path / "o.npz")], capsys)
    assert code == 0, err
    with np.load(tmp_path / "o.npz") as z:  # the sum, 120000, kept in float64
        assert z["bias"].dtype == np.float64 and z["bias"].max() == 120000
