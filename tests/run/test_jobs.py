"""``run --jobs N``: cases in N worker processes give the report ``--jobs 1`` gives, in the same
order; progress still comes a line per pair; a worker lives across cases (frameworks imported
once per worker); a worker that dies costs its case's unfinished pairs, not the run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.fault_adapters import Correct, Exits

from harness import adapters as registry
from harness import compare, runner
from harness.adapters.reference import Reference
from harness.cases import discover
from harness.cli import main
from harness.progress import RunProgress
from harness.report import write_report
from harness.results import RunResult
from harness.run_options import RunOptions
from harness.shard import Shard
from harness.spec import Case

ROOT = Path(__file__).parents[2]
CASE_FILES = [ROOT / "cases" / "initial-state.yaml", ROOT / "cases" / "gru-reset.yaml",
              ROOT / "cases" / "clip-gate.yaml"]
SMALL = [Case(name=f"c{k}", cell=("lstm", "gru")[k % 2], input_size=2, hidden_size=3, batch=2,
              seq_len=3, seed=k) for k in range(4)]


def _pairs(result: RunResult) -> list[tuple]:
    return [(p.case, p.adapter, p.status, p.reason) for p in result.pairs]


def test_jobs_2_writes_the_report_jobs_1_writes(tmp_path):
    pytest.importorskip("torch")
    cases = discover(CASE_FILES)
    adapters = registry.select(["reference", "noise-floor", "torch-cpu"])
    lines: list[str] = []
    one = runner.run(cases, adapters)
    two = runner.run(cases, adapters, RunOptions(jobs=2), on_event=RunProgress(lines.append))
    assert _pairs(two) == _pairs(one)
    assert {"pass", "not applicable", "baseline"} <= {p.status for p in one.pairs}
    write_report(one, tmp_path / "one")
    write_report(two, tmp_path / "two")
    assert (tmp_path / "two" / "divergence.csv").read_text() == \
        (tmp_path / "one" / "divergence.csv").read_text()
    assert (tmp_path / "two" / "layouts.md").read_text() == \
        (tmp_path / "one" / "layouts.md").read_text()
    assert list(two.prepare_seconds) == list(one.prepare_seconds)
    assert two.jobs == 2 and one.jobs == 1
    # one progress line per pair as it finishes, counted 1..N whatever order they finish in
    total = len(one.pairs)
    assert [line.split("]")[0] for line in lines] == [f"[{k}/{total}" for k in range(1, total + 1)]
    assert sorted(line.split()[1] for line in lines) == \
        sorted(f"{p.case}::{p.adapter}" for p in one.pairs)


def test_a_worker_runs_many_cases():
    """Workers are reused from case to case (a framework is imported once per worker), and
    the adapters do not run in this process."""
    result = runner.run(SMALL, [Reference(), Correct()], RunOptions(keep_outputs=True, jobs=2))
    pids = {int(p.outputs.extras["pid"]) for p in result.pairs if p.adapter == "fault-none"}
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    assert [p.status for p in result.pairs] == ["baseline", "pass"] * len(SMALL)


def test_a_dead_worker_costs_its_case_only():
    adapters = [Reference(), Correct(), Exits(), Correct()]
    adapters[-1].name = "fault-none-after"
    result = runner.run(SMALL, adapters, RunOptions(jobs=2))
    got = {(p.case, p.adapter): p for p in result.pairs}
    assert [(p.case, p.adapter) for p in result.pairs] == \
        [(c.name, a.name) for c in SMALL for a in adapters]  # every pair, in order
    for case in SMALL:
        assert got[case.name, "fault-none"].status == compare.PASS  # finished before the death
        died = got[case.name, "fault-exits"]
        assert died.status == compare.ERROR
        assert died.reason == ("the --jobs worker process exited with code 3 while running "
                               "this pair")
        after = got[case.name, "fault-none-after"]
        assert after.status == compare.ERROR
        assert after.reason == ("not run: the --jobs worker process exited with code 3 while "
                                f"running {case.name}::fault-exits")
    assert result.failed


def test_jobs_with_isolate_costs_one_pair():
    """--isolate inside --jobs: each worker has adapter worker processes of its own."""
    adapters = [Reference(), Exits(), Correct()]
    result = runner.run(SMALL[:2], adapters, RunOptions(jobs=2, isolate=True, timeout=60))
    got = {(p.case, p.adapter): p for p in result.pairs}
    for case in SMALL[:2]:
        assert got[case.name, "fault-exits"].reason.startswith(
            "the worker process of fault-exits exited with code 3")
        assert got[case.name, "fault-none"].status == compare.PASS


def test_case_errors_and_shards_with_jobs(tmp_path):
    bad = Case(name="bad", cell="lstm", input_size=2, hidden_size=3,
               weights={"file": "missing.npz", "layout": "torch"}, source=str(tmp_path / "x.yaml"))
    cases = [SMALL[0], bad, SMALL[1]]
    one = runner.run(cases, [Reference(), Correct()])
    two = runner.run(cases, [Reference(), Correct()], RunOptions(jobs=3))
    assert _pairs(two) == _pairs(one)
    assert list(two.case_errors) == ["bad"] and two.case_errors == one.case_errors
    for k in (1, 2):
        a = runner.run(cases, [Reference(), Correct()], RunOptions(shard=Shard(k, 2)))
        b = runner.run(cases, [Reference(), Correct()], RunOptions(shard=Shard(k, 2), jobs=2))
        assert _pairs(a) == _pairs(b) and a.shard == b.shard == f"{k}/2"


@pytest.mark.parametrize("value", ["-1", "x"])
def test_cli_refuses_bad_jobs(value, tmp_path, capsys):
    code = main(["run", str(CASE_FILES[1]), "--adapters", "reference", "--out",
                 str(tmp_path / "r"), "--jobs", value]) if value != "x" else None
    if value == "x":  # argparse's own check of the type: exit 2 too
        with pytest.raises(SystemExit) as exc:
            main(["run", str(CASE_FILES[1]), "--jobs", value])
        code = exc.value.code
    assert code == 2
    assert "--jobs" in capsys.readouterr().err


def _refuse_outside(parent: int) -> Correct:
    if os.getpid() != parent:
        raise RuntimeError("planted: cannot be rebuilt in a worker")
    return BrokenInWorkers()


class BrokenInWorkers(Correct):
    """Pickles in this process, fails to unpickle in a worker: no worker can start."""

    name = "fault-broken-in-workers"

    def __reduce__(self):
        return _refuse_outside, (os.getpid(),)


def test_a_worker_that_cannot_start_stops_the_run():
    with pytest.raises(RuntimeError, match="a --jobs worker process could not start: the --jobs "
                                           "worker process exited with code 1"):
        runner.run(SMALL, [Reference(), BrokenInWorkers()], RunOptions(jobs=2))
