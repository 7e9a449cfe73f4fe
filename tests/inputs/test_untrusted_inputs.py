"""Weight files and case folders from strangers (issue 31): nothing read from outside the files
given, work bounded by the memory limit before reading, nothing of the user's written through
links, and one line with exit code 2 for every bad input.

Each test plants one attack (HDF5 external storage, external links and virtual datasets made
with h5py, zip bombs, symlinks, FIFOs) and checks the line, the exit code and that no byte of
the planted outside file reaches an output or the error line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support.cli import cli
from support.cli import one_line as support_one_line

from harness.cases import discover, load_cases
from harness.cli import main
from harness.errors import CaseError, WeightsError
from harness.readers import read_native
from harness.spec import Case

h5py = pytest.importorskip("h5py")

ROOT = Path(__file__).parents[2]
SECRET = b"TOPSECRET-credentials-" * 8  # 176 bytes, a whole number of float64 values
GOOD = "name: good\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_len: 3\n"
I, H = 2, 3


def one_line(code: int, err: list[str], *words: str) -> str:
    __tracebackhide__ = True
    return support_one_line(code, err, *words, absent=("TOPSECRET",))


def _secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    path = outside / "credentials"
    path.write_bytes(SECRET)
    return path


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


# 3, 15. Case discovery -------------------------------------------------------------------------

def test_discovery_does_not_follow_links_out_of_the_folder(tmp_path, capsys):
    secret = _secret(tmp_path)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a.yaml").write_text(GOOD)
    (tmp_path / "outside" / "b.yaml").write_text(GOOD.replace("good", "outside"))
    (cases / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    (cases / "data").mkdir()
    (cases / "data" / "inner.txt").write_text(GOOD.replace("good", "inner"))
    (cases / "inner.yaml").symlink_to(cases / "data" / "inner.txt")  # inside the folder: read
    # the linked folder is not entered
    assert [c.name for c in discover([cases])] == ["good", "inner"]
    (cases / "creds.yaml").symlink_to(secret)
    code, err = cli(["run", str(cases), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "creds.yaml: is a link to a file outside", "not followed")


SHADOW = "root:*:20228:0:99999:7:::\nTOPSECRET:$6$abc$def:20228:0:99999:7:::\n"  # /etc/shadow


def test_a_case_file_linked_to_a_file_outside_quotes_nothing_of_it(tmp_path, capsys):
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text(SHADOW)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "x.yaml").symlink_to(outside / "shadow")  # named: read
    code, err = cli(["run", str(tmp_path / "cases" / "x.yaml"), "--out", str(tmp_path / "r")],
                    capsys)
    line = one_line(code, err, "x.yaml: not a valid case file; it is a link to a file outside")
    assert "root:" not in line and "20228" not in line, line
    # the same text in a file of its own: the keys that are no key's form are not quoted either
    (tmp_path / "y.yaml").write_text(SHADOW)
    code, err = cli(["run", str(tmp_path / "y.yaml"), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, "y.yaml:1: ?: unknown key")
    assert "root:" not in line and "20228" not in line, line


@pytest.mark.parametrize("text", [
    "a: !TOPSECRET x\n",  # a tag, which PyYAML quotes
    "a: 'TOPSECRET\n",  # an unclosed quote
    "- TOPSECRET\n\ta: TOPSECRET\n",
])
def test_an_invalid_yaml_error_quotes_nothing_of_the_file(text, tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(text)
    code, err = cli(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "c.yaml:", "invalid YAML")


@pytest.mark.parametrize("text", [
    "[default]\naws_access_key_id = AKIA{s}\naws_secret_access_key = {s}\n",  # ~/.aws
    "machine example.org login me password {s}\n",  # ~/.netrc
    "SECRET_KEY={s}\nTOKEN: '{s}\n",  # .env
    "-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n-----END OPENSSH PRIVATE KEY-----\n",
    "user: me\npassword: {s}\n",  # YAML-like: the keys only
])
def test_a_yaml_error_does_not_quote_a_line_that_is_not_yaml(text, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(text.format(s="TOPSECRET" + "x" * 80))
    code, err = cli(["run", str(case), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, str(case))
    assert "x" * 60 not in line, line


def test_control_characters_in_file_names_are_escaped(tmp_path, capsys):
    case = tmp_path / "evil\x1b[2J\x1b]0;title\x07.yaml"
    case.write_text("cell: [\n")
    code, err = cli(["run", str(case), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, "evil\\x1b[2J\\x1b]0;title\\x07.yaml")
    assert "\x1b" not in line and "\x07" not in line


def test_a_fifo_as_a_case_or_weights_path_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "case.yaml"
    os.mkfifo(fifo)
    code, err = cli(["run", str(fifo), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "case.yaml: not a regular file")
    with pytest.raises(CaseError, match="not a regular file"):
        load_cases(fifo)
    wfifo = tmp_path / "w.pt"
    os.mkfifo(wfifo)
    code, err = cli(["convert", str(wfifo), str(tmp_path / "o.pt")], capsys)
    one_line(code, err, "w.pt: not a regular file")
    npz = tmp_path / "w.npz"
    os.mkfifo(npz)
    (tmp_path / "c.yaml").write_text(GOOD + "weights: {file: w.npz, layout: torch}\n")
    code, err = cli(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "w.npz: weights file is not a regular file")


# 5. init ------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["dangling-link", "linked-subfolder"])
def test_init_never_writes_through_links(plant, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    d = tmp_path / "d"
    d.mkdir()
    if plant == "dangling-link":
        (d / "float64.yaml").symlink_to(outside / "planted.yaml")
    else:
        (d / "gradients").symlink_to(outside, target_is_directory=True)
    code, err = cli(["init", str(d)], capsys)
    one_line(code, err, "is a symbolic link")
    assert list(outside.iterdir()) == []


# 16. Options, standard output, warnings -----------------------------------------------------------

@pytest.mark.parametrize("budget", ["-1", "nan", "0", "inf"])
def test_doctor_budget_must_be_a_positive_time(budget, tmp_path, capsys):
    code, err = cli(["doctor", "--case", str(tmp_path / "c.yaml"), "--weights",
                     str(tmp_path / "w.npz"), "--layout", "torch", "--adapter", "torch-cpu",
                     "--budget", budget], capsys)
    one_line(code, err, "--budget: expected a finite number of seconds > 0")


def test_a_passing_run_into_a_full_standard_output_is_not_bad_input(tmp_path, capsys,
                                                                    monkeypatch):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        # a tolerance of the run's own: the noise floor's pair is judged by it, not by its own
        # floor (then it would pass by construction: a vacuous run, exit 1)
        code = main(["run", str(case), "--out", str(tmp_path / "r"), "--quiet", "--adapters",
                     "reference,noise-floor", "--atol", "1e-3"])
        monkeypatch.undo()
        with contextlib.suppress(OSError):  # what it could not write is dropped at close
            full.close()
    err = capsys.readouterr().err.splitlines()
    assert code == 74 and len(err) == 1 and "cannot write to standard output" in err[0], err
    assert (tmp_path / "r" / "run.json").is_file()


def test_a_full_standard_output_is_not_bad_input(tmp_path):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "harness", "init", str(tmp_path / "d")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=ROOT)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr.splitlines() == ["rnn-harness: error: cannot write to standard output: "
                                        "No space left on device (files the command wrote are "
                                        "complete)"]
    assert (tmp_path / "d" / "float64.yaml").is_file()


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


# 17. Nothing written outside the paths given --------------------------------------------------

_SIDE_EFFECTS = """
import sys
import numpy as np
from harness.cli import main
w, out = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
np.savez(f"{w}/w.npz", weight_ih_l0=rng.normal(size=(12, 2)), weight_hh_l0=rng.normal(size=(12, 3)),
         bias_ih_l0=np.zeros(12), bias_hh_l0=np.zeros(12))
codes = [
    main(["run", f"{w}/c.yaml", "--out", f"{out}/r", "--quiet", "--plots", "all",
          "--adapters", "reference,torch-cpu,onnxruntime,keras3,openvino,"
          "onnx-reference,flax-linen,keras3-jax,torch-onnx-torchscript,litert-keras3"]),
    main(["run", f"{w}/c.yaml", "--out", f"{out}/s1", "--quiet", "--shard", "1/2",
          "--adapters", "reference,noise-floor", "--isolate"]),
    main(["run", f"{w}/c.yaml", "--out", f"{out}/s2", "--quiet", "--shard", "2/2",
          "--adapters", "reference,noise-floor"]),
    main(["merge", f"{out}/m", f"{out}/s1", f"{out}/s2"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz", f"{out}/w.onnx"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz",
          f"{out}/w.weights.h5"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz",
          f"{out}/w.msgpack"]),
    main(["convert", "--from", "flax", "--to", "torch", f"{out}/w.msgpack", f"{out}/back.npz"]),
    main(["doctor", "--case", f"{w}/c.yaml", "--weights", f"{w}/w.npz", "--layout", "torch",
          "--adapter", "torch-cpu", "--budget", "5"]),
    main(["init", f"{out}/init"]),
]
print("CODES", codes)
"""


def _in_fresh_home(tmp_path: Path, script: str, timeout: float) -> tuple[str, Path]:
    """Run ``script`` (argv: the case folder w, the output folder) in a subprocess whose HOME,
    XDG_CACHE_HOME and TMPDIR are fresh empty folders; assert they stay empty and w holds only
    what the script wrote there first. Returns (stdout, w)."""
    env = dict(os.environ)
    fresh = {k: tmp_path / k.lower() for k in ("HOME", "XDG_CACHE_HOME", "TMPDIR")}
    for k, p in fresh.items():
        p.mkdir()
        env[k] = str(p)
    for k in ("XDG_CONFIG_HOME", "KERAS_HOME", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(k, None)
    w, out = tmp_path / "w", tmp_path / "out"
    w.mkdir()
    out.mkdir()
    (w / "c.yaml").write_text(GOOD)
    proc = subprocess.run([sys.executable, "-c", script, str(w), str(out)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    for k, p in fresh.items():
        left = sorted(str(q.relative_to(p)) for q in p.rglob("*"))
        assert left == [], f"{k}: the commands left {left}"
    return proc.stdout + proc.stderr, w


def test_commands_leave_home_cache_and_tmpdir_unchanged(tmp_path):
    pytest.importorskip("keras")
    pytest.importorskip("onnxruntime")
    said, w = _in_fresh_home(tmp_path, _SIDE_EFFECTS, 300)
    # the merge (3rd) of the references alone tests no framework: vacuous, exit 1
    assert "CODES [0, 0, 0, 1, 0, 0, 0, 0," in said, said
    assert sorted(q.name for q in w.iterdir()) == ["c.yaml", "w.npz"]


# The roads with caches and workers of their own: Inductor's caches and allow_rnn
# (torch-compile, a compile of tens of seconds), Keras 3 workers on torch and OpenVINO, MLX,
# litert-torch (torch.export, TensorFlow's MLIR converter and the LiteRT interpreter: no
# export_dir, no cache), ExecuTorch's lowering and runtime (its program saved with
# --save-outputs, inside the run's folder). Named, so the named-only ones run too.
_ROADS = """
import sys
from harness.cli import main
w, out = sys.argv[1], sys.argv[2]
print("CODE", main(["run", f"{w}/c.yaml", "--out", f"{out}/r", "--quiet", "--save-outputs",
                    "--adapters", "reference,torch-compile,keras3-torch,keras3-openvino,mlx,"
                    "litert-torch,executorch,executorch-portable"]))
"""


@pytest.mark.roads  # a compile: the nightly's
def test_the_compiling_roads_leave_home_cache_and_tmpdir_unchanged(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("keras")
    said, w = _in_fresh_home(tmp_path, _ROADS, 900)
    assert "CODE 0" in said, said
    assert sorted(q.name for q in w.iterdir()) == ["c.yaml"]
    pairs = json.loads((tmp_path / "out" / "r" / "run.json").read_text())["pairs"]
    assert {p["adapter"]: p["status"] for p in pairs} == {
        "reference": "baseline", "torch-compile": "pass", "keras3-torch": "pass",
        "keras3-openvino": "pass", "mlx": "pass", "litert-torch": "pass", "executorch": "pass",
        "executorch-portable": "pass"}, pairs
