"""The report folder (harness.report.folder, ownership, swap, read_back) against untrusted
folders and killed runs.

Issue 31's report-folder items, each planted: folders that are not reports (a website, a case
folder, a user's own run.json, a home-like folder) are refused with one line and left whole;
a report's own entries are replaced, the user's are kept; merge copies only regular files of
a shard; a swap killed between its renames is restored by the next run; crafted run.json files
(a huge shard count, a case without a spec, a newer schema) are one line, exit 2.

Cheap: tiny cases, the reference adapter and the test-only ``fault-none`` (a correct adapter),
reports written in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.case_factory import case_maker
from support.fault_adapters import Correct

from harness import runner
from harness.adapters.reference import Reference
from harness.cli import main
from harness.errors import HarnessError
from harness.report import folder as report_folder
from harness.report import swap, write_report
from harness.report.folder import MARKER
from harness.report.read_back import read_report
from harness.report.record import SCHEMA_VERSION
from harness.run_options import RunOptions
from harness.shard import Shard

make = case_maker(batch=2, seq_len=3, hidden_size=3, input_size=2)
CASES = [make(name="a"), make(name="b", cell="gru")]
CASE_YAML = "name: c\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 1\nseq_len: 2\n"


def _report(out: Path, cases=CASES, adapters=None, shard: Shard | None = None) -> Path:
    adapters = adapters if adapters is not None else [Reference(), Correct()]
    write_report(runner.run(cases, adapters, RunOptions(shard=shard)), out)
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("rnn-harness: error: "), err
    return err[0]


def _run_cli(out: Path, tmp_path: Path) -> int:
    case = tmp_path / "c.yaml"
    if not case.exists():
        case.write_text(CASE_YAML)
    return main(["run", str(case), "--adapters", "reference", "--out", str(out), "--quiet"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    for k in (1, 2):
        _report(root / f"s{k}", shard=Shard(k, 2))
    return root


def _copy_shards(shards: Path, where: Path) -> list[Path]:
    return [Path(shutil.copytree(shards / f"s{k}", where / f"s{k}")) for k in (1, 2)]


def _edit_run(folder: Path, change) -> None:
    doc = json.loads((folder / "run.json").read_text())
    change(doc)
    (folder / "run.json").write_text(json.dumps(doc))


# Item 4: --out replaces only a report folder, and only the report's entries ---------------------

def _website(d: Path) -> str:
    (d / "index.html").write_text("<h1>my site</h1>")
    (d / "style.css").write_text("body {}")
    return "style.css"


def _case_folder(d: Path) -> str:
    (d / "c.yaml").write_text(CASE_YAML)
    (d / "summary.md").write_text("my notes")
    return "c.yaml"


def _users_run_json(d: Path) -> str:
    (d / "run.json").write_text(json.dumps({"name": "my training run", "pairs": []}))
    (d / "model.pt").write_bytes(b"weights")
    return "model.pt"


def _home(d: Path) -> str:
    (d / ".bashrc").write_text("alias x=y")
    (d / "Documents").mkdir()
    (d / "Documents" / "thesis.tex").write_text("x")
    (d / "divergence.csv").write_text("a,b\n1,2\n")
    (d / "\x1b[31mred").write_text("x")
    return "Documents"


@pytest.mark.parametrize("plant", [_website, _case_folder, _users_run_json, _home])
def test_out_refuses_a_folder_that_is_not_a_report(plant, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    name = plant(out)
    before = _files(out)
    assert _run_cli(out, tmp_path) == 2
    line = _one_line(capsys)
    assert "--out" in line and "not a report folder" in line and name in line, line
    assert "\x1b" not in line
    assert _files(out) == before
    assert main(["merge", str(out), str(tmp_path / "shard")]) == 2  # OUT_DIR: the same rule
    assert "OUT_DIR" in _one_line(capsys) and _files(out) == before


def test_a_report_is_replaced_but_the_users_entries_in_it_are_kept(tmp_path, capsys):
    out = _report(tmp_path / "report")
    marker = json.loads((out / MARKER).read_text())
    assert marker["tool"] == "rnn-harness" and "run.json" in marker["entries"]
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "data.csv").write_text("1")
    assert main(["diff", str(out), str(out), "--out", str(out / "nightly-diff.md")]) == 0
    assert "nightly-diff.md" in json.loads((out / MARKER).read_text())["entries"]
    capsys.readouterr()
    assert _run_cli(out, tmp_path) == 1  # reference only: nothing compared
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "mine" / "data.csv").read_text() == "1"
    assert not (out / "nightly-diff.md").exists()  # diff --out's file belongs to the report
    assert read_report(out).run.pairs[0].case == "c"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.")] == []


def _report_with_outputs(out: Path) -> Path:
    write_report(runner.run(CASES, [Reference(), Correct()], RunOptions(keep_outputs=True)), out,
                 outputs=True)
    return out


@pytest.mark.parametrize("before_the_list", [False, True], ids=["listed", "before-the-list"])
def test_the_users_files_in_outputs_are_kept_by_the_next_report(tmp_path, before_the_list):
    out = _report_with_outputs(tmp_path / "report")
    ours = sorted(str(p.relative_to(out / "outputs")) for p in (out / "outputs").rglob("*.npz"))
    assert ours == ["a/fault-none.npz", "a/reference.npz", "b/fault-none.npz", "b/reference.npz"]
    if before_the_list:  # a report written before the marker listed outputs/
        doc = json.loads((out / MARKER).read_text())
        del doc["outputs"]
        (out / MARKER).write_text(json.dumps(doc))
    (out / "outputs" / "NOTES.txt").write_text("mine")
    (out / "outputs" / "prev").mkdir()
    (out / "outputs" / "prev" / "my-model.tflite").write_bytes(b"model")
    (out / "outputs" / "a" / "keep.txt").write_text("mine too")
    (out / "outputs" / "a" / "fault-none.npz").write_bytes(b"stale")  # ours: replaced
    _report_with_outputs(out)
    assert (out / "outputs" / "NOTES.txt").read_text() == "mine"
    assert (out / "outputs" / "prev" / "my-model.tflite").read_bytes() == b"model"
    assert (out / "outputs" / "a" / "keep.txt").read_text() == "mine too"
    assert (out / "outputs" / "a" / "fault-none.npz").read_bytes() != b"stale"
    assert "NOTES.txt" not in json.loads((out / MARKER).read_text())["outputs"]
    _report(out)  # without --save-outputs: the user's files stay, ours go
    left = sorted(str(p.relative_to(out / "outputs")) for p in (out / "outputs").rglob("*")
                  if p.is_file())
    assert left == ["NOTES.txt", "a/keep.txt", "prev/my-model.tflite"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.")] == []


_OTHER_NAMESPACE = """
import os, sys
from pathlib import Path
os.getpid = lambda: int(sys.argv[2])  # the PID another PID namespace sees: not this process
from harness.report.swap import staged
with staged(Path(sys.argv[1])) as partial:
    print(partial.name, flush=True)
    sys.stdin.readline()  # writing its report until told to stop (or killed)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_live_run_is_seen_alive_by_its_lock_whatever_its_pid(tmp_path):
    """Two runs into one --out from different PID namespaces: the PID in the other run's
    hidden folder names no process here (a dead one's, below), but the run holds its lock, so
    its partial folder is left alone until it ends."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "report"
    other = subprocess.Popen([sys.executable, "-c", _OTHER_NAMESPACE, str(out), str(dead.pid)],
                             cwd=Path(__file__).parents[2], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        name = other.stdout.readline().strip()
        assert name.startswith(f".report.partial-{dead.pid}-"), name
        assert swap.recover(out) == []
        _report(out)  # a whole report into the same folder meanwhile
        assert (tmp_path / name).is_dir(), "a live run's partial folder was swept"
    finally:
        other.kill()
        other.wait(30)
    # killed: the kernel released its lock, the next run clears what it left
    assert swap.recover(out) == [f"removed {name}, left by a killed run"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.")] == []
    assert read_report(out).run.pairs


def test_a_report_from_before_the_marker_is_recognised_read_and_replaced(tmp_path, capsys):
    old = _report(tmp_path / "old")
    (old / MARKER).unlink()
    _edit_run(old, lambda doc: doc.pop("schema_version"))
    (old / "diff.md").write_text("the nightly's diff")
    (old / "mine.txt").write_text("mine")
    new = _report(tmp_path / "new")
    assert read_report(old).run.schema_version == 0
    # the first nightly after the change; its diff goes into the earlier report
    assert main(["diff", str(old), str(new), "--out", str(old / "regressions.md")]) == 0
    capsys.readouterr()
    assert "regressions.md" in json.loads((old / MARKER).read_text())["entries"]
    _report(old)
    assert (old / "mine.txt").read_text() == "mine" and not (old / "diff.md").exists()
    assert not (old / "regressions.md").exists()
    assert (old / MARKER).is_file()
    assert json.loads((old / "run.json").read_text())["schema_version"] == SCHEMA_VERSION


def test_merge_into_the_shards_parent_never_deletes_the_shards(shards, tmp_path, capsys):
    pub = tmp_path / "pub"
    pub.mkdir()
    folders = _copy_shards(shards, pub)
    before = _files(pub)
    assert main(["merge", str(pub), *map(str, folders)]) == 2
    line = _one_line(capsys)
    assert "not a report folder" in line and "s1" in line
    assert _files(pub) == before
    (pub / MARKER).write_text(json.dumps({"tool": "rnn-harness", "entries": []}))
    assert main(["merge", str(pub), *map(str, folders)]) == 0
    capsys.readouterr()
    assert {k: v for k, v in _files(pub).items() if k.startswith(("s1/", "s2/"))} == before
    assert [p.case for p in read_report(pub).run.pairs]
    inner = pub / "outputs"  # a shard where the report writes: refused, not replaced
    shutil.copytree(folders[0], inner)
    assert main(["merge", str(pub), str(inner), str(folders[1])]) == 2
    assert "would replace the shard folder" in _one_line(capsys)
    assert (inner / "run.json").is_file()


# Item 2: merge copies only regular files that live inside the shard -----------------------------

def test_merge_copies_no_symlink_out_of_a_shard(shards, tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.npz").write_bytes(b"SECRET-BYTES")
    folders = _copy_shards(shards, tmp_path)
    outputs = folders[0] / "outputs" / "a"
    outputs.mkdir(parents=True)
    (outputs / "fault-none.npz").write_bytes(b"real output")
    (outputs / "leak.npz").symlink_to(secret / "key.npz")
    os.link(secret / "key.npz", outputs / "hardlink.npz")  # same file system: tmp_path
    (folders[0] / "outputs" / "linked").symlink_to(secret, target_is_directory=True)
    (folders[1] / "outputs").symlink_to(secret, target_is_directory=True)
    (folders[1] / "errors.log").symlink_to(secret / "key.npz")
    assert main(["merge", str(tmp_path / "m"), *map(str, folders)]) == 0
    merged = _files(tmp_path / "m")
    assert merged["outputs/a/fault-none.npz"] == b"real output"
    assert not any(b"SECRET-BYTES" in v for v in merged.values())
    assert [p for p in (tmp_path / "m").rglob("*") if p.is_symlink()] == []
    (folders[1] / "run.json").rename(folders[1] / "real.json")
    (folders[1] / "run.json").symlink_to(folders[1] / "real.json")
    assert main(["merge", str(tmp_path / "m"), *map(str, folders)]) == 2
    assert "run.json is a symbolic link" in _one_line(capsys)


# Item 6: a swap killed between its renames is restored, not swept --------------------------------

def _kill_between_renames(out: Path, pid: int) -> Path:
    """What a SIGKILL after the swap's first rename leaves: the report aside, no ``out``."""
    aside = out.parent / f".{out.name}.old-{pid}-abc123"
    aside.mkdir()
    os.replace(out, aside / "report")
    return aside


def test_a_swap_killed_between_its_renames_is_restored_by_the_next_run(tmp_path, capsys,
                                                                       monkeypatch):
    out = _report(tmp_path / "report")
    (out / "mine.txt").write_text("mine")
    before = _files(out)
    aside = _kill_between_renames(out, _dead_pid())
    assert not out.exists()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run", interrupted)  # the next run is interrupted too
    assert _run_cli(out, tmp_path) == 130
    err = capsys.readouterr().err.splitlines()
    assert "left as it was" in err[-1] and str(out) in err[-1], err
    assert _files(out) == before and not aside.exists()


_KILLED_MID_SWAP = """
import os, signal, sys
real = os.replace

def replace(src, dst):  # SIGKILL right after the swap's first rename
    real(src, dst)
    if ".old-" in str(dst):
        os.kill(os.getpid(), signal.SIGKILL)

os.replace = replace
from harness.cli import main
main(["run", sys.argv[1], "--adapters", "reference", "--out", sys.argv[2], "--quiet"])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_run_sigkilled_mid_swap_leaves_what_the_next_run_restores(tmp_path, capsys):
    out = tmp_path / "report"
    assert _run_cli(out, tmp_path) == 1  # reference only: nothing compared, report written
    (out / "mine.txt").write_text("mine")
    before = _files(out)
    proc = subprocess.run([sys.executable, "-c", _KILLED_MID_SWAP, str(tmp_path / "c.yaml"),
                           str(out)], cwd=Path(__file__).parents[2], capture_output=True,
                          timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.old-")]
    swap.check_writable(out)  # what the next run does first
    assert _files(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report.")] == []


def test_a_swap_killed_after_its_renames_moves_the_users_entries_back(tmp_path):
    out = _report(tmp_path / "report")
    (out / "mine.txt").write_text("mine")
    aside = _kill_between_renames(out, _dead_pid())
    # what the killed run had swapped in, before moving the user's entries across
    shutil.copytree(_report(tmp_path / "fresh"), out)
    _report(out)
    assert (out / "mine.txt").read_text() == "mine" and not aside.exists()


def test_the_interrupted_line_says_where_the_previous_report_is(tmp_path):
    out = tmp_path / "report"
    swap.check_writable(out)
    assert "there was no report" in swap.interrupted_note()
    _report(out)
    swap.check_writable(out)
    assert "left as it was" in swap.interrupted_note()
    aside = _kill_between_renames(out, os.getpid())  # as if this process were mid-swap
    swap._note(out, "aside", aside)
    note = swap.interrupted_note()
    assert "left as it was" not in note and str(aside) in note and "puts back" in note


# Items 9, 13, schema: crafted run.json in a shard ------------------------------------------------

@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(shard="1/20000000"), "shard: expected K/N with 1 <= K <= N <= 10000"),
    (lambda d: d.update(shard="2/999"), "expected N <= 4"),
    (lambda d: d["cases"]["a"].pop("spec"), "no recorded spec"),
    (lambda d: d["cases"].pop("a"), "no recorded spec"),
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "upgrade rnn-harness"),
    (lambda d: d.update(pairs=[{"case": "a"}]), "pairs[0].adapter"),
])
def test_crafted_run_json_is_one_line(change, words, shards, tmp_path, capsys):
    folders = _copy_shards(shards, tmp_path)
    target = next(f for f in folders if any(
        p["case"] == "a" for p in json.loads((f / "run.json").read_text())["pairs"]))
    _edit_run(target, change)
    assert main(["merge", str(tmp_path / "m"), *map(str, folders)]) == 2
    line = _one_line(capsys)
    assert words in line and str(target) in line, line
    assert len(line) < 500 and not (tmp_path / "m").exists()


# Item 14: names too long for the file system, refused up front ----------------------------------

@pytest.mark.parametrize("length", [231, 239, 250])
def test_an_out_too_long_for_the_file_system_is_refused_before_running(length, tmp_path,
                                                                       capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(runner, "run", lambda *a, **k: ran.append(1))
    assert _run_cli(tmp_path / ("r" * length), tmp_path) == 2
    line = _one_line(capsys)
    assert "name too long" in line and "--out" in line, line
    assert ran == []


def test_every_name_the_report_writes_is_checked(tmp_path):
    names = report_folder.report_names([("c" * 200, "reference")], outputs=True)
    report_folder.check_names(tmp_path / "r", names)  # 231 bytes: fits
    with pytest.raises(HarnessError, match="the file plots/"):
        report_folder.check_names(tmp_path / "r", [f"plots/{'x' * 300}.png"])
    deep = tmp_path / "/".join(["d" * 200] * 21)
    with pytest.raises(HarnessError, match="path longer than"):
        report_folder.check_names(deep, names)


# merge's nothing-compared rule, and the record's room for more -----------------------------------

def test_merge_of_shards_that_compared_nothing_exits_1(tmp_path, capsys):
    for k in (1, 2):
        _report(tmp_path / f"s{k}", adapters=[Reference()], shard=Shard(k, 2))
    assert main(["merge", str(tmp_path / "m"), str(tmp_path / "s1"), str(tmp_path / "s2")]) == 1
    assert "nothing was compared" in capsys.readouterr().err


def test_the_run_record_keeps_what_a_newer_harness_adds(tmp_path, capsys):
    out = _report(tmp_path / "r")
    _edit_run(out, lambda d: d["adapters"]["fault-none"].update(
        environment={"driver": "555.1"}, later="x"))
    run = read_report(out).run
    assert run.adapters["fault-none"].environment == {"driver": "555.1"}
    assert main(["diff", str(out), str(out)]) == 0


def test_writing_a_report_imports_no_framework(tmp_path):
    """Everything a report says was recorded by the run: writing it asks no adapter (an
    adapter the run never reached included) and so imports no framework."""
    code = f"""
import sys
from harness import runner
from harness.adapters import get_adapter
from harness.cases import load_cases
from harness.report import write_report
case = tmp = {str(tmp_path / "c.yaml")!r}
open(case, "w").write({CASE_YAML!r})
result = runner.run(load_cases(case), [get_adapter("reference")])
result.adapters.append(get_adapter("torch-cpu"))  # selected, never reached by the run
before = set(sys.modules)
write_report(result, {str(tmp_path / "out")!r})
frameworks = {{"torch", "tensorflow", "tf_keras", "keras", "jax", "onnxruntime", "onnx",
              "openvino", "ai_edge_litert"}}
print(sorted({{m.split(".")[0] for m in set(sys.modules) - before}} & frameworks))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    doc = json.loads((tmp_path / "out" / "run.json").read_text())
    assert doc["adapters"]["torch-cpu"] == {"available": False,
                                           "reason": "not recorded by the run", "device": "cpu"}
