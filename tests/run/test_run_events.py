"""The run's typed options and events (harness.run_options, harness.run_events): a listener
hears each case's events in order, between RunStarted and RunEnded, whatever ``jobs`` is, and
RunEnded after an interruption too; the options are frozen, checked, and picklable for the
``--jobs`` workers; a MemoryLimit the run was given is recorded in its result."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from support.fault_adapters import Correct

from harness import runner
from harness.adapters.reference import Reference
from harness.errors import HarnessError
from harness.memory import MemoryLimit
from harness.run_events import (
    CaseFailed,
    CasePrepared,
    PairFinished,
    PairStarted,
    RunEnded,
    RunStarted,
)
from harness.run_options import RunOptions
from harness.shard import Shard
from harness.spec import Case

CASES = [Case(name=f"c{k}", cell=("lstm", "gru")[k % 2], input_size=2, hidden_size=3, batch=2,
              seq_len=3, seed=k) for k in range(2)]


def _case_of(event) -> str:
    return event.result.case if isinstance(event, PairFinished) else event.case


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_listener_hears_each_case_in_order(jobs, tmp_path):
    bad = Case(name="bad", cell="lstm", input_size=2, hidden_size=3,
               weights={"file": "missing.npz", "layout": "torch"}, source=str(tmp_path / "x.yaml"))
    events = []
    result = runner.run([CASES[0], bad, CASES[1]], [Reference(), Correct()],
                        RunOptions(jobs=jobs), on_event=events.append)
    assert events[0] == RunStarted(pairs=6) and events[-1] == RunEnded()
    by_case: dict[str, list] = {}
    for event in events[1:-1]:
        by_case.setdefault(_case_of(event), []).append(event)
    for case in CASES:
        heard = by_case[case.name]
        assert [type(e) for e in heard] == [CasePrepared, PairStarted, PairFinished,
                                            PairStarted, PairFinished]
        assert [e.adapter for e in heard if isinstance(e, PairStarted)] == \
            ["reference", "fault-none"]
        assert heard[1:] == [PairStarted(case.name, "reference"), heard[2],
                             PairStarted(case.name, "fault-none"), heard[4]]
    assert by_case["bad"] == [CaseFailed("bad", result.case_errors["bad"],
                                         ("reference", "fault-none"))]
    # the results heard are the ones reported
    heard_results = {(e.result.case, e.result.adapter, e.result.status, e.result.reason)
                     for e in events if isinstance(e, PairFinished)}
    assert heard_results == {(p.case, p.adapter, p.status, p.reason) for p in result.pairs
                             if p.case != "bad"}


class Interrupted(Correct):
    name = "fault-interrupted"

    def _run(self, case, native, inputs):
        raise KeyboardInterrupt


def test_the_last_event_is_run_ended_after_an_interruption_too():
    events = []
    with pytest.raises(KeyboardInterrupt):
        runner.run(CASES, [Reference(), Interrupted()], on_event=events.append)
    assert events[-1] == RunEnded()
    assert events[-2] == PairStarted(CASES[0].name, "fault-interrupted")


def test_a_silent_run_needs_no_listener():
    result = runner.run(CASES[:1], [Reference(), Correct()])
    assert [p.status for p in result.pairs] == ["baseline", "pass"]


def test_options_are_frozen_checked_and_picklable():
    options = RunOptions(timeout=2.0, jobs=3, shard=Shard(1, 2), step_mode="on")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.jobs = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(options)) == options
    assert RunOptions() == RunOptions(timeout=None, isolate=False, max_memory=None,
                                      keep_outputs=False, shard=None, jobs=1, step_mode="auto",
                                      device="all")
    with pytest.raises(HarnessError, match="expected a number of worker processes >= 1, got 0"):
        RunOptions(jobs=0)


def test_a_memory_limit_is_recorded_in_the_result():
    limit = MemoryLimit(2**30, "set by --max-memory")
    result = runner.run(CASES[:1], [Reference()], RunOptions(max_memory=limit))
    assert result.memory_limits == limit.record() == {
        "host_bytes": 2**30, "host": "set by --max-memory", "gpu_bytes": None,
        "gpu": "no GPU work"}
    # a plain byte count says nothing of where it came from: nothing recorded
    assert runner.run(CASES[:1], [Reference()], RunOptions(max_memory=2**30)).memory_limits is None

