"""A run killed or interrupted midway (SIGKILL, SIGTERM, Ctrl-C, a closed terminal) leaves no
half-written report file: the report folder is whole or untouched, leftovers are removed by the
next run, and no worker process outlives it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.fault_adapters import CASES, Correct, Raises

from harness import runner
from harness.adapters.reference import Reference
from harness.npz import write_text
from harness.report import write_report
from harness.run_options import RunOptions

pytestmark = pytest.mark.slow  # worker processes, timeouts, killed runs

ROOT = Path(__file__).parents[2]


# Killed runs ------------------------------------------------------------------------------------

def _wait_for(proc: subprocess.Popen, text: str, limit: float = 120) -> str:
    """Read proc's stderr until ``text`` appears; returns what was read."""
    seen = ""
    deadline = time.monotonic() + limit
    while text not in seen:
        line = proc.stderr.readline()
        if not line or time.monotonic() > deadline:
            raise AssertionError(f"never saw {text!r}; stderr so far:\n{seen}")
        seen += line
    return seen


@pytest.fixture(scope="module")
def earlier_report(tmp_path_factory) -> Path:
    """A complete report of one case, written once for the module's killed runs to copy."""
    out = tmp_path_factory.mktemp("earlier") / "report"
    subprocess.run([sys.executable, "-m", "harness", "run", "cases/projection.yaml",
                    "--adapters", "reference,torch-cpu", "--out", str(out)], cwd=ROOT,
                   check=True, capture_output=True, timeout=300)
    return out


def _after_an_earlier_report(out: Path, earlier: Path) -> tuple[list[str], dict]:
    """The command of a whole-suite run into ``out``, and the files of an earlier, complete
    report (one case, a copy of ``earlier``) already there."""
    cmd = [sys.executable, "-m", "harness", "run", "cases", "--adapters", "reference,torch-cpu",
           "--out", str(out), "--verbose"]  # a line per pair: the test waits for the third
    shutil.copytree(earlier, out)
    return cmd, _files(out)


@pytest.mark.skipif(sys.platform != "linux", reason="SIGKILL and /proc")
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_killed_run_leaves_no_partial_report(tmp_path, isolate, earlier_report):
    out = tmp_path / "report"
    cmd, before = _after_an_earlier_report(out, earlier_report)
    assert {"divergence.csv", "summary.md", "run.json"} <= set(before)
    marker = uuid.uuid4().hex  # finds this run's processes, workers included
    env = {**os.environ, "RNN_HARNESS_TEST_RUN": marker}
    proc = subprocess.Popen(cmd + (["--isolate"] if isolate else []), cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        _wait_for(proc, "[3/")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    after = _files(out)
    assert after == before, "a killed run changed or left files in the report folder"
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker), "worker processes outlived the killed run"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _processes_with(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                pass
    return found


_WRITER = """
import sys
from harness.npz import write_text
a, b = "A" * 2_000_000 + "\\n", "B" * 3_000_000 + "\\n"
print("ready", flush=True)
for i in range(10**9):
    write_text(sys.argv[1], a if i % 2 else b)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_report_files_are_whole_even_when_killed_while_writing(tmp_path):
    """write_text (every report file goes through it) replaces a file whole, or not at all."""
    target = tmp_path / "divergence.csv"
    for delay in (0.05, 0.13, 0.31):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n"
        time.sleep(delay)
        proc.kill()
        proc.wait(30)
        text = target.read_text()
        assert text in ("A" * 2_000_000 + "\n", "B" * 3_000_000 + "\n")
        for leftover in tmp_path.glob("*.tmp"):  # an interrupted write leaves only its temp file
            leftover.unlink()
    write_text(target, "done\n")
    assert target.read_text() == "done\n" and sorted(tmp_path.iterdir()) == [target]


# Interrupted runs: the report folder is whole or untouched ---------------------------------------

def _hidden_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


@pytest.mark.skipif(sys.platform != "linux", reason="signals and /proc")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_an_interrupted_run_leaves_the_previous_report_intact(tmp_path, sig, code, isolate,
                                                              earlier_report):
    if signal.getsignal(sig) == signal.SIG_IGN:
        # nohup, a background job, some CI wrappers: the run inherits the "ignore" and rightly
        # keeps it (harness/cli.py), so the signal cannot interrupt it
        pytest.skip(f"{sig.name} is ignored in this test run (inherited at start); a run "
                    f"started so keeps ignoring it")
    out = tmp_path / "report"
    cmd, before = _after_an_earlier_report(out, earlier_report)
    marker = uuid.uuid4().hex
    env = {**os.environ, "RNN_HARNESS_TEST_RUN": marker}
    proc = subprocess.Popen(cmd + (["--isolate"] if isolate else []), cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "[3/")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, stderr[-2000:]
    assert "interrupted" in stderr.splitlines()[-1] and "Traceback" not in stderr, stderr[-2000:]
    assert "report in" not in stdout
    assert _files(out) == before, "the previous report changed"
    assert _hidden_leftovers(out) == []
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker), "worker processes outlived the interrupted run"


def test_a_failed_report_write_keeps_the_previous_report(tmp_path):
    from harness.report.folder import MARKER
    from harness.report.swap import staged

    out = tmp_path / "report"
    out.mkdir()
    (out / "run.json").write_text("old")
    (out / MARKER).write_text('{"tool": "rnn-harness", "entries": ["run.json"]}')
    before = _files(out)
    with pytest.raises(KeyboardInterrupt):
        with staged(out) as partial:
            (partial / "run.json").write_text("new")
            raise KeyboardInterrupt
    assert _files(out) == before and _hidden_leftovers(out) == []
    with staged(out) as partial:
        (partial / "run.json").write_text("new")
    assert _files(out)["run.json"] == b"new" and _hidden_leftovers(out) == []


def test_a_reused_folder_keeps_nothing_of_the_previous_run(tmp_path):
    out = tmp_path / "report"
    result = runner.run(CASES[:1], [Reference(), Raises()], RunOptions(keep_outputs=True))
    write_report(result, out, outputs=True)
    assert (out / "errors.log").exists() and (out / "outputs").is_dir()
    result = runner.run(CASES[:1], [Reference(), Correct()])
    write_report(result, out)
    assert not (out / "errors.log").exists() and not (out / "outputs").exists()


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "report"
    for kind in ("partial", "old"):
        leftover = tmp_path / f".report.{kind}-{dead.pid}-abc123"
        leftover.mkdir()
        (leftover / "run.json").write_text("half")
    alive = tmp_path / f".report.partial-{os.getpid()}-xyz"  # a run still going: kept
    alive.mkdir()
    result = runner.run(CASES[:1], [Reference(), Correct()])
    write_report(result, out)
    assert _hidden_leftovers(out) == [alive.name]


_HUNG_RUN = """
import atexit, sys
sys.path.insert(0, "tests")
from support.fault_adapters import Sleeps
from harness.adapters import ADAPTERS
ADAPTERS[Sleeps.name] = Sleeps()
atexit.register(lambda: print("interpreter shutdown", flush=True))
sys.argv = ["rnn-harness", "run", sys.argv[1], "--adapters", "reference,fault-sleeps",
            "--timeout", "0.5", "--out", sys.argv[2], "--quiet"]
from harness.cli import entry
entry()
"""


def test_a_run_with_an_abandoned_adapter_call_exits_without_interpreter_shutdown(tmp_path):
    """A timed-out call still running in a thread: the process ends with os._exit once its
    output is flushed, so framework code in that thread cannot abort it (SIGABRT) at exit."""
    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: lstm\ninput_size: 2\nhidden_size: 3\n")
    proc = subprocess.run([sys.executable, "-c", _HUNG_RUN, str(case), str(tmp_path / "r")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "1 error" in proc.stdout and "report in" in proc.stdout, proc.stdout
    assert "interpreter shutdown" not in proc.stdout
    assert (tmp_path / "r" / "run.json").exists()


def test_an_inherited_sigterm_ignore_is_kept(monkeypatch):
    """As Python keeps an ignored SIGINT, the CLI keeps an ignored SIGTERM (nohup-style
    wrappers); otherwise SIGTERM interrupts the run like Ctrl-C."""
    from harness import cli

    seen = []
    monkeypatch.setattr(cli, "_main", lambda args: seen.append(signal.getsignal(signal.SIGTERM)))
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        cli.main(["adapters"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        cli.main(["adapters"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [signal.SIG_IGN, cli._on_sigterm]


_START_INTERRUPTED = """
import gc, os, signal, subprocess, sys
from harness.adapters.reference import Reference
from harness.isolation import _AdapterJob
from harness.workers import Worker

# Ctrl-C raises KeyboardInterrupt here even where the test run ignores SIGINT (nohup, a
# background job): a child inherits the ignore, and Python then installs no handler of its own
signal.signal(signal.SIGINT, signal.default_int_handler)

started = []
real_popen = subprocess.Popen
def interrupted_popen(*args, **kwargs):  # the child exists; its start-up data is sent next
    started.append(real_popen(*args, **kwargs))
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # where Python runs a handler: an unheld Ctrl-C is raised here
        pass
    return started[-1]
subprocess.Popen = interrupted_popen
interrupted = False
try:
    w = Worker(_AdapterJob, (Reference(),), name="w")
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    interrupted = True
if interrupted:
    # the half-made Worker goes, and its end of the pipe with it: the worker process reads EOF
    # and ends; waited for (not a sleep), so whatever it would print on a half start is seen
    gc.collect()
    for child in started:
        child.wait(100)
        print("worker ended" if child.poll() is not None else "worker still running", flush=True)
    sys.exit(0)
subprocess.Popen = real_popen
print("ready:", w.receive(60)[0])
w.stop()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="signals")
def test_a_ctrl_c_while_a_worker_starts_waits_for_the_start_to_be_whole():
    """A SIGINT that comes while the parent writes a new worker's start-up data is handled once
    the start is whole: the worker does not die reading half of it (EOFError and a traceback on
    the terminal) and the parent still sees the interrupt."""
    proc = subprocess.run([sys.executable, "-c", _START_INTERRUPTED], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "EOFError" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["interrupted", "worker ended"], proc.stdout


_INTERRUPTED_IMPORT = """
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test run ignores

MODULE = sys.argv[1]

class CtrlC(importlib.abc.MetaPathFinder):  # one Ctrl-C exactly while MODULE is imported
    def find_spec(self, name, path, target=None):
        if name == MODULE and self in sys.meta_path:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["rnn-harness", "schema"]
import runpy
runpy.run_module("harness", run_name="__main__")
"""


@pytest.mark.skipif(sys.platform != "linux", reason="signals")
@pytest.mark.parametrize("module", ["harness.cli.run", "harness.scratch"])
def test_a_ctrl_c_while_the_command_is_imported_is_one_line(module):
    """``python -m harness``: a Ctrl-C while the commands are imported (harness.cli.run) or
    while main() imports what it needs (harness.scratch) ends as a later one does."""
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT, module], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [
        "rnn-harness: interrupted (SIGINT): nothing of this run was written"], proc.stderr[-2000:]


_SLEEPING_RUN = """
import sys
sys.path.insert(0, "tests")
from support.fault_adapters import Sleeps
from harness.adapters import ADAPTERS
ADAPTERS[Sleeps.name] = Sleeps()
sys.argv = ["rnn-harness", "run", sys.argv[1], "--adapters", "reference,fault-sleeps",
            "--out", sys.argv[2], "--verbose"]
from harness.cli import entry
entry()
"""


@pytest.mark.skipif(sys.platform != "linux", reason="signals")
def test_a_closed_terminal_sighup_cleans_up_as_sigterm_does(tmp_path):
    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        pytest.skip("SIGHUP is ignored in this test run (nohup): a run started so keeps it")
    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: lstm\ninput_size: 2\nhidden_size: 3\n")
    tmp = tmp_path / "tmp"  # the run's $TMPDIR: its scratch folder is made there
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _SLEEPING_RUN, str(case), str(tmp_path / "r")],
                            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)},
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "[1/2]")  # the reference's pair is done; fault-sleeps hangs
        assert [p.name for p in tmp.iterdir() if p.name.startswith("rnn-harness-")]
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 129, stderr[-2000:]
    assert stderr.splitlines()[-1].startswith("rnn-harness: interrupted (SIGHUP): nothing of "
                                              "this run was written"), stderr[-2000:]
    assert "Traceback" not in stderr
    assert list(tmp.iterdir()) == [], "the scratch folder was left behind"
    assert not (tmp_path / "r").exists() and _hidden_leftovers(tmp_path / "r") == []
