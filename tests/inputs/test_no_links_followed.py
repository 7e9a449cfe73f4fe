"""Nothing the harness writes goes through a link (issue 53, items 2 and 3; harness/safe_files.py).

A file is created beside its name and renamed over it: a link of that name is replaced, and the
file it pointed to keeps its bytes. A folder the harness writes into (``--out``, a reproducer's
folder, what lies below them) that is a link is refused with one line naming it, and nothing
reaches where it points. Each test plants the link, runs the command as a user would and checks
the exit code, the line and the planted target.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.cli import cli, one_line
from support.runnable import runnable

from harness import data, params
from harness.cli import main
from harness.doctor import Doctor
from harness.dtypes import round_to
from harness.layouts import get_layout
from harness.mistakes import catalogue
from harness.npz import load_npz, save_npz
from harness.spec import Case

USERS = b"the user's own file: not the harness's to write\n"
BASIC = "name: basic\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_len: 3\n"
LINK_WORDS = "is a symbolic link, and rnn-harness does not write through links"


def _users_file(tmp_path: Path) -> Path:
    mine = tmp_path / "home" / "notes.txt"
    mine.parent.mkdir(exist_ok=True)
    mine.write_bytes(USERS)
    return mine


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside


def _replaced(link: Path, mine: Path) -> None:
    """``link`` is now a file of the harness's, and the file it pointed to is as it was."""
    __tracebackhide__ = True
    assert mine.read_bytes() == USERS, "the user's file was written through a link"
    assert link.is_file() and not link.is_symlink(), f"{link} should be a file of its own now"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of one small LSTM with an ONNX graph's pair (its reproducer has the ONNX test
    data set), its outputs saved."""
    runnable("onnxruntime")
    where = tmp_path_factory.mktemp("report")
    (where / "basic.yaml").write_text(BASIC)
    code = main(["run", str(where / "basic.yaml"), "--adapters", "reference,onnxruntime",
                 "--out", str(where / "rep"), "--plots", "none", "--save-outputs"])
    assert code == 0
    return where / "rep"


def _copy(report: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(report, tmp_path / "rep", symlinks=True))


# repro (item 2's three cases, and item 3) --------------------------------------------------------

@pytest.mark.onnx
def test_repro_out_replaces_a_linked_test_data_file(report, tmp_path, capsys):
    rep, mine = _copy(report, tmp_path), _users_file(tmp_path)
    out = tmp_path / "o"
    (out / "test_data_set_0").mkdir(parents=True)
    (out / "test_data_set_0" / "input_0.pb").symlink_to(mine)
    code, err = cli(["repro", str(rep), "basic::onnxruntime", "--out", str(out)], capsys)
    assert code == 0, err
    _replaced(out / "test_data_set_0" / "input_0.pb", mine)
    assert len(list((out / "test_data_set_0").iterdir())) == 6  # inputs x, h0, c0; y, h_n, c_n


@pytest.mark.onnx
def test_repro_into_a_report_replaces_a_linked_output_file(report, tmp_path, capsys):
    rep, mine = _copy(report, tmp_path), _users_file(tmp_path)
    data = rep / "repro" / "basic" / "onnxruntime" / "test_data_set_0"
    data.mkdir(parents=True)
    (data / "output_0.pb").symlink_to(mine)
    code, err = cli(["repro", str(rep), "basic::onnxruntime"], capsys)
    assert code == 0, err
    _replaced(data / "output_0.pb", mine)


@pytest.mark.onnx
def test_repro_refuses_a_linked_test_data_folder(report, tmp_path, capsys):
    rep, outside = _copy(report, tmp_path), _outside(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    (out / "test_data_set_0").symlink_to(outside, target_is_directory=True)
    code, err = cli(["repro", str(rep), "basic::onnxruntime", "--out", str(out)], capsys)
    one_line(code, err, f"{out / 'test_data_set_0'}: --out: {LINK_WORDS}")
    assert list(outside.iterdir()) == []


@pytest.mark.onnx
def test_repro_refuses_a_linked_out_folder(report, tmp_path, capsys):
    rep, outside = _copy(report, tmp_path), _outside(tmp_path)
    (tmp_path / "o").symlink_to(outside, target_is_directory=True)
    code, err = cli(["repro", str(rep), "basic::onnxruntime", "--out", str(tmp_path / "o")],
                    capsys)
    one_line(code, err, f"{tmp_path / 'o'}: --out: {LINK_WORDS}")
    assert list(outside.iterdir()) == []


@pytest.mark.onnx
def test_a_report_whose_repro_folder_links_outside_is_one_line(report, tmp_path, capsys):
    rep, outside = _copy(report, tmp_path), _outside(tmp_path)
    (rep / "repro").mkdir()
    (rep / "repro" / "basic").symlink_to(outside, target_is_directory=True)
    code, err = cli(["repro", str(rep), "basic::onnxruntime"], capsys)
    one_line(code, err, f"{rep / 'repro' / 'basic'}: {LINK_WORDS}")
    assert list(outside.iterdir()) == []


@pytest.mark.onnx
def test_a_users_link_above_the_out_folder_is_followed(report, tmp_path, capsys):
    """Only the folder written into and what is below it must be the harness's own: a path
    through the user's own link (``~/work -> /data/work``) is theirs to give."""
    rep, outside = _copy(report, tmp_path), _outside(tmp_path)
    (tmp_path / "work").symlink_to(outside, target_is_directory=True)
    code, err = cli(["repro", str(rep), "basic::onnxruntime", "--out",
                     str(tmp_path / "work" / "o")], capsys)
    assert code == 0, err
    assert (outside / "o" / "repro.py").is_file()


# run, merge, diff --out, init, convert ---------------------------------------------------------

@pytest.mark.onnx
def test_run_and_merge_refuse_a_linked_out_folder(report, tmp_path, capsys):
    outside = _outside(tmp_path)
    (tmp_path / "linked").symlink_to(outside, target_is_directory=True)
    (tmp_path / "basic.yaml").write_text(BASIC)
    code, err = cli(["run", str(tmp_path / "basic.yaml"), "--adapters", "reference", "--out",
                     str(tmp_path / "linked")], capsys)
    one_line(code, err, f"{tmp_path / 'linked'}: --out: {LINK_WORDS}")
    code, err = cli(["merge", str(report), "--out", str(tmp_path / "linked"),
                     "--allow-partial", "--plots", "none"], capsys)
    one_line(code, err, f"{tmp_path / 'linked'}: --out: {LINK_WORDS}")
    assert list(outside.iterdir()) == []
    code, err = cli(["merge", str(report), "--out", str(tmp_path / "m"), "--allow-partial",
                     "--plots", "none"], capsys)
    assert code == 0, err
    assert (tmp_path / "m" / "outputs" / "basic" / "onnxruntime.npz").is_file()


@pytest.mark.onnx
def test_diff_out_replaces_a_link(report, tmp_path, capsys):
    mine = _users_file(tmp_path)
    (tmp_path / "diff.md").symlink_to(mine)
    code = main(["diff", str(report), str(report), "--out", str(tmp_path / "diff.md")])
    assert code == 0, capsys.readouterr().err
    _replaced(tmp_path / "diff.md", mine)


def test_init_refuses_a_linked_folder(tmp_path, capsys):
    outside = _outside(tmp_path)
    (tmp_path / "d").symlink_to(outside, target_is_directory=True)
    code, err = cli(["init", str(tmp_path / "d")], capsys)
    one_line(code, err, f"{tmp_path / 'd'}: DIR: {LINK_WORDS}")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("suffix", [".npz", ".onnx"])
def test_convert_replaces_a_linked_output(suffix, tmp_path, capsys):
    mine = _users_file(tmp_path)
    H, I = 3, 2  # noqa: N806 - as in the equations
    rng = np.random.default_rng(0)
    save_npz(tmp_path / "w.npz", {"weight_ih_l0": rng.normal(size=(4 * H, I)),
                                  "weight_hh_l0": rng.normal(size=(4 * H, H)),
                                  "bias_ih_l0": np.zeros(4 * H), "bias_hh_l0": np.zeros(4 * H)})
    (tmp_path / "c.yaml").write_text(BASIC)
    out = tmp_path / f"out{suffix}"
    out.symlink_to(mine)
    code, err = cli(["convert", "--case", str(tmp_path / "c.yaml"), "--from", "torch", "--to",
                     "onnx", str(tmp_path / "w.npz"), str(out)], capsys)
    assert code == 0, err
    _replaced(out, mine)


# doctor --write-fixed, --repro -----------------------------------------------------------------

def _planted_doctor_files(tmp_path: Path) -> list[str]:
    """A GRU's keras weights whose framework ran them with z and r swapped: the doctor finds
    the mistake and has corrected weights to write."""
    case = Case(name="planted", cell="gru", input_size=2, hidden_size=3, batch=2, seq_len=3)
    lay = get_layout("keras")
    native = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    [swap] = [m for m in catalogue(case, lay).mistakes if m.id == "order:all:zrn"]
    probe = Doctor(case, lay, native, inputs, {"y": np.zeros(1)}, tol=None)
    expected = {k: round_to(v, "float32") for k, v in probe.outputs(probe.trial((swap,))).items()}
    save_npz(tmp_path / "w.npz", native)
    save_npz(tmp_path / "out.npz", expected)
    d = case.model_dump(exclude={"source", "weights", "inputs", "tolerance", "adapters",
                                 "exclude", "description"}, exclude_none=True)
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(d))
    return ["doctor", "--case", str(tmp_path / "case.yaml"), "--weights",
            str(tmp_path / "w.npz"), "--layout", "keras", "--expected", str(tmp_path / "out.npz")]


def test_doctor_write_fixed_and_repro_write_through_no_link(tmp_path, capsys):
    argv = _planted_doctor_files(tmp_path)
    mine, outside = _users_file(tmp_path), _outside(tmp_path)
    (tmp_path / "fixed.npz").symlink_to(mine)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "repro.py").symlink_to(mine)
    code = main([*argv, "--write-fixed", str(tmp_path / "fixed.npz"), "--repro",
                 str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0, out
    _replaced(tmp_path / "fixed.npz", mine)
    _replaced(tmp_path / "r" / "repro.py", mine)
    assert set(load_npz(tmp_path / "fixed.npz")) == set(load_npz(tmp_path / "w.npz"))
    (tmp_path / "linked").symlink_to(outside, target_is_directory=True)
    code = main([*argv, "--repro", str(tmp_path / "linked")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"No reproducer written to {tmp_path / 'linked'}: it is a symbolic link" in out
    assert list(outside.iterdir()) == []
