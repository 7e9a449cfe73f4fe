"""``Adapter.own_process``: an adapter that always runs in a worker process of its own, started
with its environment variables (harness/isolation.py), whatever the executor."""

from __future__ import annotations

import os

import pytest
from support.own_process_adapters import VARIABLE, OwnProcess

from harness import compare, isolation
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.runner import run
from harness.spec import Case

SMALL = dict(cell="gru", input_size=2, hidden_size=3, batch=2, seq_len=3, seed=5)


@pytest.fixture
def own():
    """A fresh pool of own-process workers for the test, stopped after it."""
    isolation.own_workers().close()
    yield isolation.own_workers()
    isolation.own_workers().close()


def test_env_applied_in_one_worker_parent_untouched(own):
    adapter = OwnProcess()
    before = own.started
    pids = set()
    for seed in (1, 2):  # two pairs, each with an executor of its own (as conftest's items)
        r = run_pair(prepare(Case(name=f"own{seed}", **(SMALL | {"seed": seed}))), adapter)
        assert r.status == compare.PASS, r.reason
        assert r.environment["available"], r.environment
        pids.add(int(r.outputs.extras["pid"]))
    assert own.started - before == 1, "one worker for the process, not one per pair"
    assert pids == {int(r.environment["versions"]["pid"])} and os.getpid() not in pids
    assert VARIABLE not in os.environ  # the parent's environment is not changed
    keras_home = r.environment["versions"]["keras_home"]
    assert keras_home and keras_home != os.environ.get("KERAS_HOME")  # scratch of its own
    assert os.path.isdir(keras_home)
    own.close()
    assert not os.path.exists(keras_home), "the worker's scratch folder is removed with it"
    # asked outside a run (the adapters command, the probe): the same worker answers
    assert isolation.unavailable_reason(adapter) is None
    assert adapter.unavailable_reason() is not None  # here, in the parent, it cannot run


def test_crash_and_timeout_are_error_rows_and_the_worker_restarts(own):
    adapter = OwnProcess()
    crashed = run_pair(prepare(Case(name="crash", **SMALL)), adapter)
    assert crashed.status == compare.ERROR
    assert "exited with code 3" in crashed.reason
    ex = isolation.InProcess(timeout=1.0)  # the executor's timeout holds in the worker
    hung = run_pair(prepare(Case(name="hang", **SMALL)), adapter, ex)
    assert hung.status == compare.ERROR and "timed out after 1 s" in hung.reason, hung.reason
    assert "killed" in hung.reason
    after = run_pair(prepare(Case(name="after", **SMALL)), adapter)
    assert after.status == compare.PASS, after.reason


def test_run_starts_one_worker_and_stops_it(own):
    adapter = OwnProcess()
    cases = [Case(name=f"r{k}", **(SMALL | {"seed": k})) for k in range(3)]
    before = own.started
    result = run(cases, [adapter])
    assert [p.status for p in result.pairs] == [compare.PASS] * 3
    assert own.started - before == 1
    assert not own._workers, "the run's end stops the worker"
