"""Adapter faults lose nothing: an adapter that raises, returns NaN/Inf or the wrong shape, hangs
or kills its process is one error row with the reason; the rest of the run completes and its
report is written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest
from support.fault_adapters import (
    CASES,
    Correct,
    CrashesOnFirstCase,
    Exits,
    KillsItself,
    NotInstalled,
    Raises,
    ReturnsInf,
    ReturnsNaN,
    ReturnsNaNBesideLayers,
    Segfaults,
    Silent,
    Sleeps,
    WrongShape,
)

from harness import compare, runner
from harness.adapters.reference import Reference
from harness.report import write_report
from harness.results import PairResult, RunResult
from harness.run_options import RunOptions
from harness.spec import Case

pytestmark = pytest.mark.slow  # worker processes, timeouts, killed runs


def pairs(result: RunResult) -> dict[tuple[str, str], PairResult]:
    return {(p.case, p.adapter): p for p in result.pairs}


def assert_report_complete(result: RunResult, out: Path) -> None:
    write_report(result, out)
    csv = pd.read_csv(out / "divergence.csv")
    passed = {p.adapter for p in result.pairs if p.status == compare.PASS}
    assert set(csv["adapter"]) == passed  # rows for every pair that ran, none for errors
    summary = (out / "summary.md").read_text()
    for p in result.pairs:
        if p.status == compare.ERROR:
            assert p.reason.split(" (")[0][:60] in summary, p.reason


def test_in_process_faults_are_error_rows(tmp_path):
    adapters = [Reference(), Raises(), ReturnsNaN(), ReturnsNaNBesideLayers(), ReturnsInf(),
                WrongShape(), Silent(), NotInstalled(), Correct()]
    result = runner.run(CASES, adapters)
    got = pairs(result)
    for case in ("first", "second"):
        assert got[case, "fault-none"].status == compare.PASS
        assert got[case, "fault-raises"].reason == f"RuntimeError: planted failure on {case}"
        assert "Traceback" in got[case, "fault-raises"].detail
        assert got[case, "fault-unavailable"].status == compare.UNAVAILABLE
    assert got["first", "fault-nan"].reason == "AdapterFault: returned 1 non-finite value(s) in y"
    # NaN where the divergence does not read (y beside y_layers): the exact check finds it
    assert got["first", "fault-nan-unread"].reason == (
        "AdapterFault: returned 1 non-finite value(s) in y")
    assert got["first", "fault-inf"].reason == "AdapterFault: returned 6 non-finite value(s) in h_n"
    assert got["first", "fault-shape"].reason == (
        "AdapterFault: returned y of shape [3, 2, 3], expected [2, 3, 3]")
    assert got["first", "fault-no-cn"].reason == "AdapterFault: returned no c_n"
    assert got["second", "fault-no-cn"].status == compare.PASS  # a GRU has no c_n
    assert result.failed and not result.case_errors
    assert_report_complete(result, tmp_path / "report")
    assert "planted failure on first" in (tmp_path / "report" / "errors.log").read_text()


def test_in_process_timeout_abandons_the_hung_adapter(tmp_path):
    start = time.perf_counter()
    result = runner.run(CASES, [Reference(), Sleeps(), Correct()], RunOptions(timeout=0.5))
    assert time.perf_counter() - start < 30
    got = pairs(result)
    assert got["first", "fault-sleeps"].status == compare.ERROR
    assert got["first", "fault-sleeps"].reason.startswith("timed out after 0.5 s")
    # the thread cannot be stopped: later pairs of that adapter are refused, not queued behind it
    assert got["second", "fault-sleeps"].reason.startswith(
        "not run: fault-sleeps timed out earlier (case first)")
    assert got["first", "fault-none"].status == got["second", "fault-none"].status == compare.PASS
    assert_report_complete(result, tmp_path / "report")


def test_no_timeout_runs_in_the_calling_thread():
    result = runner.run(CASES[:1], [Reference(), Correct()], RunOptions(keep_outputs=True))
    assert int(pairs(result)["first", "fault-none"].outputs.extras["pid"]) == os.getpid()


def test_isolated_faults_cost_one_pair_each(tmp_path):
    adapters = [Reference(), Raises(), ReturnsNaN(), WrongShape(), Sleeps(), Exits(),
                KillsItself(), Segfaults(), NotInstalled(), Correct()]
    start = time.perf_counter()
    result = runner.run(CASES, adapters, RunOptions(timeout=2, isolate=True, keep_outputs=True))
    assert time.perf_counter() - start < 120  # ~10 s: a worker start is an interpreter start
    got = pairs(result)
    died = "(it is restarted for the next pair)"
    for case in ("first", "second"):
        assert got[case, "fault-none"].status == compare.PASS
        assert got[case, "fault-raises"].reason == f"RuntimeError: planted failure on {case}"
        assert "in _run" in got[case, "fault-raises"].detail  # the worker's traceback
        assert got[case, "fault-sleeps"].reason.startswith("timed out after 2 s; the worker "
                                                           "process was killed")
        assert got[case, "fault-exits"].reason == (
            f"the worker process of fault-exits exited with code 3 {died}")
        assert got[case, "fault-sigkill"].reason == (
            f"the worker process of fault-sigkill was killed by SIGKILL {died}")
        assert got[case, "fault-segfault"].reason == (
            f"the worker process of fault-segfault was killed by SIGSEGV {died}")
        assert got[case, "fault-unavailable"].status == compare.UNAVAILABLE
        assert got[case, "fault-unavailable"].reason == "fakeframework is not installed (planted)"
    assert got["first", "fault-nan"].reason == "AdapterFault: returned 1 non-finite value(s) in y"
    assert got["first", "fault-shape"].reason.startswith("AdapterFault: returned y of shape")
    # one worker per adapter, reused across pairs (its framework imported once), not this process
    pids = {int(got[c, "fault-none"].outputs.extras["pid"]) for c in ("first", "second")}
    assert len(pids) == 1 and os.getpid() not in pids
    assert_report_complete(result, tmp_path / "report")


def test_isolated_worker_is_restarted_after_a_crash():
    cases = [Case(name=n, cell="lstm", input_size=2, hidden_size=3) for n in ("ok1", "boom", "ok2")]
    result = runner.run(cases, [Reference(), CrashesOnFirstCase()],
                        RunOptions(isolate=True, keep_outputs=True))
    got = pairs(result)
    assert got["boom", "fault-crash-once"].reason.startswith(
        "the worker process of fault-crash-once exited with code 1")
    for ok in ("ok1", "ok2"):
        assert got[ok, "fault-crash-once"].status == compare.PASS
    pid1 = int(got["ok1", "fault-crash-once"].outputs.extras["pid"])
    pid2 = int(got["ok2", "fault-crash-once"].outputs.extras["pid"])
    assert pid1 != pid2  # a fresh worker


def test_isolated_unpicklable_adapter_is_an_error_row():
    class Local(Correct):  # defined in a function: a worker cannot import it
        name = "fault-local"

    result = runner.run(CASES[:1], [Reference(), Local()], RunOptions(isolate=True))
    r = pairs(result)["first", "fault-local"]
    assert r.status == compare.ERROR and r.reason.startswith("cannot start a worker process")


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolate"])
def test_a_declared_upstream_crash_is_a_known_bug_not_a_failure(isolate):
    """An adapter's crash declared as an open upstream bug (KnownUpstreamCrash, e.g. a
    converter's SIGSEGV in its child process) is a known-upstream-bug row naming the bug, here
    and from a worker process; the run does not fail for it."""
    from support.fault_adapters import CrashesAsKnown

    case = Case(name="tiny", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=3)
    result = runner.run([case], [Reference(), CrashesAsKnown()], RunOptions(isolate=isolate))
    pair = next(p for p in result.pairs if p.adapter == "fault-known-crash")
    assert pair.status == compare.KNOWN_BUG
    assert pair.reason == ("known upstream bug org/repo#1: the converter's process died with "
                           "SIGSEGV")
    assert not result.failed
