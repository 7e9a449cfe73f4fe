"""Bad case and weight files are exit code 2 and one line on stderr naming the file and field,
never a traceback, and never run code from the input (yaml.safe_load, np.load without pickle);
weights or generated scales that overflow the case's dtype are bad input too.

The corpus is ``tests/inputs/bad_inputs/``: each ``*.yaml`` says what is wrong with it and, in
``# expect:`` comment lines, the substrings its error line must hold (file, YAML line, field,
message). Its binary members are made by ``tests/inputs/bad_inputs/make_binaries.py``."""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support.bad_input import GOOD, run_cli
from support.bad_input import torch_lstm_npz as _torch_lstm_npz

from harness.dtypes import round_to
from harness.errors import WeightsError
from harness.npz import load_npz

CORPUS = Path(__file__).parent / "bad_inputs"
ROOT = Path(__file__).parents[2]
FILES = sorted(CORPUS.glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    text = path.read_bytes().decode("latin-1")
    return [m.group(1) for m in re.finditer(r"^# expect: (.*?)\s*$", text, re.M)]


def test_corpus_is_large_and_every_file_says_what_it_expects():
    assert len(FILES) >= 30
    for f in FILES:
        assert expectations(f), f"{f.name} has no '# expect:' line"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_bad_input_exits_2_with_one_line(path, tmp_path, capsys):
    out = tmp_path / "report"
    code, err, stdout = run_cli([str(path), "--out", str(out), "--adapters", "reference"], capsys)
    assert code == 2, (code, err)
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("rnn-harness: error: ") and "Traceback" not in line
    assert str(path) in line, f"the error does not name {path}: {line}"
    for want in expectations(path):
        assert want in line, f"expected {want!r} in: {line}"
    assert stdout == ""
    assert not out.exists(), "nothing may run (or be written) when the input is bad"


@pytest.mark.parametrize("name", ["yaml-python-tag", "weights-pickled", "size-absurd-hidden",
                                  "deep-nesting", "inputs-lengths-long"])
def test_bad_input_from_the_command_line(name, tmp_path):
    path = CORPUS / f"{name}.yaml"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--out",
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and str(path) in lines[0], proc.stderr
    assert all(want in lines[0] for want in expectations(path)), lines[0]


def test_a_folder_with_one_bad_file_runs_nothing(tmp_path, capsys):
    (tmp_path / "a-good.yaml").write_text(GOOD)
    (tmp_path / "b-bad.yaml").write_text(GOOD.replace("good", "bad")
                                         + "weights: {file: missing.npz, layout: torch}\n")
    code, err, _ = run_cli([str(tmp_path), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1
    assert "missing.npz: weights file not found" in err[0] and "b-bad.yaml:7" in err[0]
    assert not (tmp_path / "r").exists()


def test_binaries_are_what_the_script_makes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_binaries", CORPUS / "make_binaries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    for made in sorted(tmp_path.iterdir()):
        committed = CORPUS / made.name
        assert committed.exists() and _same_file(committed, made), (
            f"{committed} is stale: run python tests/inputs/bad_inputs/make_binaries.py")


def _same_file(a: Path, b: Path) -> bool:
    """The same bytes; or, for .npz archives, the same members with the same .npy headers (an
    object array's pickle differs between NumPy releases, and is never unpickled here)."""
    if a.read_bytes() == b.read_bytes():
        return True
    if not (zipfile.is_zipfile(a) and zipfile.is_zipfile(b)):
        return False
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        if za.namelist() != zb.namelist():
            return False
        for name in za.namelist():
            x, y = za.read(name), zb.read(name)
            if x != y and not (x.startswith(b"\x93NUMPY") and b"'|O'" in x[:128]
                               and x[:128].split(b"}")[0] == y[:128].split(b"}")[0]):
                return False
    return True


# Nothing in the input runs --------------------------------------------------------------------

class Pwn:
    """Unpickling this runs a shell command (what a hostile .npz would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_hostile_pickle_in_an_npz_is_never_loaded(tmp_path, capsys):
    marker = tmp_path / "pwned"
    weights = tmp_path / "w.npz"
    arrays = {"weight_ih_l0": np.array([Pwn(marker)], dtype=object),
              "weight_hh_l0": np.zeros((12, 3)), "bias_ih_l0": np.zeros(12),
              "bias_hh_l0": np.zeros(12)}
    np.savez(weights, **arrays)  # np.savez pickles object arrays
    assert b"system" in weights.read_bytes()  # the payload is really there
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + "weights: {file: w.npz, layout: torch}\n")
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "pickle" in err[0] and "weight_ih_l0" in err[0]
    with pytest.raises(WeightsError, match="pickle"):
        load_npz(weights)
    assert not marker.exists()
    with pytest.raises(ValueError):  # and np.load itself refuses too: belt and braces
        with np.load(weights, allow_pickle=False) as z:
            z["weight_ih_l0"]
    assert pickle.dumps(Pwn(marker))  # the payload is a working one
    assert not marker.exists()


def test_a_hostile_torch_save_file_is_never_unpickled(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    torch.save({"weight_ih_l0": Pwn(marker)}, tmp_path / "w.pt")
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + "weights: {file: w.pt, layout: torch}\n")
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and "w.pt: cannot load with torch.load(weights_only=True)" in err[0]
    assert not marker.exists()


def test_a_python_tag_in_yaml_is_never_run(tmp_path, capsys):
    marker = tmp_path / "pwned"
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + f"description: !!python/object/apply:os.system ['touch {marker}']\n")
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and f"{case}:7: invalid YAML" in err[0]
    assert not marker.exists()


# Sizes the loader refuses ----------------------------------------------------------------------

def test_a_huge_case_file_is_refused_unparsed(tmp_path, capsys):
    case = tmp_path / "big.yaml"
    case.write_text(GOOD + "description: '" + "x" * (2 << 20) + "'\n")
    code, err, _ = run_cli([str(case)], capsys)
    assert code == 2 and "more than the 1048576 allowed" in err[0]


def test_missing_paths_and_empty_folders(tmp_path, capsys):
    code, err, _ = run_cli([str(tmp_path / "nope.yaml")], capsys)
    assert code == 2
    assert err == [f"rnn-harness: error: {tmp_path / 'nope.yaml'}: no such file or folder"]
    (tmp_path / "empty").mkdir()
    code, err, _ = run_cli([str(tmp_path / "empty")], capsys)
    assert code == 2 and len(err) == 1 and "no case files found" in err[0]


# Numbers that overflow the case's dtype ---------------------------------------------------------

def test_weights_that_overflow_the_case_dtype_are_bad_input(tmp_path, capsys):
    _torch_lstm_npz(tmp_path / "w.npz", 3, 4, 1e5)
    case = tmp_path / "c.yaml"
    case.write_text("name: f16\ncell: lstm\ninput_size: 3\nhidden_size: 4\ndtype: float16\n"
                    "weights: {file: w.npz, layout: torch}\n")
    code, err, out = run_cli([str(case), "--out", str(tmp_path / "r"), "--adapters",
                              "reference,onnxruntime"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "w.npz" in err[0] and "overflow" in err[0] and "float16" in err[0], err[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("key", ["weights", "inputs"])
def test_a_generated_scale_that_overflows_is_bad_input(key, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + f"{key}: {{scale: 1.0e300}}\n")
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1, err
    assert f"c.yaml:7: {key}.scale:" in err[0] and "overflow" in err[0], err[0]


def test_a_non_finite_reference_is_an_error_of_the_case(tmp_path, capsys):
    # W x = +inf and R h0 = -inf in float64: the gate pre-activation is NaN
    I = H = 2
    w = {}
    for g in "ifgo":
        w[f"layer0/forward/W_{g}"] = np.full((H, I), 1e308)
        w[f"layer0/forward/R_{g}"] = np.full((H, H), -1e308)
        w[f"layer0/forward/bW_{g}"] = np.zeros(H)
        w[f"layer0/forward/bR_{g}"] = np.zeros(H)
    np.savez(tmp_path / "w.npz", **w)
    np.savez(tmp_path / "x.npz", x=np.ones((1, 2, I)), h0=np.ones((1, 1, H)),
             c0=np.zeros((1, 1, H)))
    case = tmp_path / "c.yaml"
    case.write_text("name: nan\ncell: lstm\ninput_size: 2\nhidden_size: 2\nbatch: 1\n"
                    "seq_len: 2\ndtype: float64\nweights: {file: w.npz, layout: canonical}\n"
                    "inputs: {file: x.npz}\n")
    code, err, out = run_cli([str(case), "--out", str(tmp_path / "r"), "--adapters",
                              "reference,torch-cpu", "--quiet"], capsys)
    assert code == 1, (code, err, out)
    assert "pass" not in out and "error" in out, out
    report = tmp_path / "r"
    assert "float64 reference overflows" in (report / "run.json").read_text()


def test_a_float16_overflow_is_inf_without_a_warning_on_stderr():
    """Values beyond float16's range are ±inf in float16 arithmetic (a pre-activation above
    65504), which the harness rounds to as it is: no "RuntimeWarning: overflow encountered in
    cast" on stderr (a float16 case with weights of scale 5e4 printed it through torch-cpu's
    pair)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = round_to(np.array([1e6, -1e6, 1.0]), "float16").tolist()
    assert got == [np.inf, -np.inf, 1.0]


# Integers written plainly; endless files --------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ('input_size: "4"\n', "expected a valid integer, got str"),
    ("input_size: 4.0\n", "expected a valid integer, got float"),
    ("input_size: 017\n", "leading 0"),
    ("input_size: 1" + "0" * 400 + "\n", "expected an integer below 2**62"),
])
def test_integers_are_yaml_integers_written_plainly(text, words, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD.replace("input_size: 2\n", text))
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1 and words in err[0] and "c.yaml:3" in err[0], err


@pytest.mark.parametrize("text, where", [
    ("input_size: 017\n", "c.yaml:3: input_size: integer 017"),
    ("input_size: 2\nmatrix:\n  hidden_size: [3, 010]\n",
     "c.yaml:5: matrix.hidden_size.1: integer 010"),
    ("input_size: 2\ntolerance:\n  float32: {atol: 0, rtol: 00}\n",
     "c.yaml:5: tolerance.float32.rtol: integer 00"),
])
def test_a_leading_zero_integer_is_named_by_its_line_and_key(text, where, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD.replace("input_size: 2\n", text))
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1 and where in err[0] and "leading 0" in err[0], err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_an_endless_case_file_is_read_only_up_to_the_limit(tmp_path, capsys):
    # a device is not read at all (a FIFO or a terminal would block); a sparse file up to the limit
    code, err, _ = run_cli(["/dev/zero", "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1 and "not a regular file" in err[0], err
    sparse = tmp_path / "big.yaml"
    with open(sparse, "wb") as f:  # 2 GB, no disk used
        f.truncate(2 * 10**9)
    code, err, _ = run_cli([str(sparse), "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and len(err) == 1 and "more than the" in err[0], err

