"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest
from support.case_factory import case_maker

from harness.spec import Case


@pytest.fixture
def make_case(request: pytest.FixtureRequest) -> Callable[..., Case]:
    """``make_case(**kw)``: a small case (:func:`support.case_factory.case_maker`), over the test
    module's ``CASE_DEFAULTS`` if it has them."""
    return case_maker(**getattr(request.module, "CASE_DEFAULTS", {}))


@pytest.fixture(autouse=True)
def _memory_limit_of_the_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness's default memory limits follow the machine (harness.memory.max_memory);
    its tests hold every run to 4 GiB instead, so that a case meant to be refused is refused
    on a large machine too, and nothing a test runs grows with the machine. A test of the
    machine-following default deletes the variable (tests/run/test_memory_limits.py)."""
    from harness.memory import MAX_MEMORY_ENV

    monkeypatch.setenv(MAX_MEMORY_ENV, "4GiB")


@pytest.fixture(autouse=True)
def _cases_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's cases go to one worker per CPU by default (``--jobs``); the tests run them in
    the test's own process, where what a test plants (a patched adapter) is seen, unless a test
    asks for workers (tests/run/test_jobs.py)."""
    from harness.cli.run import JOBS_ENV

    monkeypatch.setenv(JOBS_ENV, "1")


ROADS_ENV = "RNN_HARNESS_TEST_ROADS"
NIGHTLY_ENV = "RNN_HARNESS_TEST_NIGHTLY"

# marker -> the variable that runs its tests (the nightly sets both)
LEFT_TO_THE_NIGHTLY = {"roads": ROADS_ENV, "nightly": NIGHTLY_ENV}
GPU_MARKER = "gpu"
NO_GPU = "no GPU here; --require-gpu runs them"
# the counts of tests deselected, by why: made where the tests are collected (each xdist worker
# collects them all), printed by the process that prints the summary
DESELECTED = pytest.StashKey[dict]()
WORKER_OUTPUT = "rnn_harness_deselected"


PYCACHE_ENV = "PYTHONPYCACHEPREFIX"


def pytest_configure(config: pytest.Config) -> None:
    """Byte code for the processes the tests start (pytest-xdist's workers, the CLI's runs,
    pytest itself), written once under a temporary folder of this test session, then read:
    where PYTHONDONTWRITEBYTECODE is set (some runner images set it) each of about fifty such
    processes would compile the harness and its tests again, and pytest would rewrite the
    assertions of every module of each pytest plugin's distribution again, about 4 s a pytest
    process. The checkout gets no __pycache__ from this; the folder goes with the session."""
    import atexit
    import os
    import shutil
    import tempfile

    if hasattr(config, "workerinput") or os.environ.get(PYCACHE_ENV):
        return  # an xdist worker (its controller made the folder), or the runner chose one
    folder = tempfile.mkdtemp(prefix="rnn-harness-tests-pycache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    os.environ[PYCACHE_ENV] = folder
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def require_gpu(config: pytest.Config) -> bool:
    """``--require-gpu`` (the plugin's option; False where the plugin is blocked)."""
    return bool(config.getoption("rnn_require_gpu", default=False))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselected, not skipped, so that a skip in the summary means something: the tests marked
    ``roads`` (the adapters that run only when named, each test a compile or a conversion of
    seconds to minutes) and ``nightly`` (the benchmark scripts' smoke runs, the determinism of
    whole runs, TensorFlow's log lines) unless their variable is 1 (the nightly sets both: the
    default test run stays within its budget); the tests marked ``gpu`` where no GPU is visible
    (:func:`harness.gpus.gpu_present`), unless ``--require-gpu`` asks for them, where a GPU test
    that skips fails (:func:`pytest_runtest_makereport`). The counts, by why, are printed at
    the end (:func:`pytest_terminal_summary`)."""
    import os

    wanted = [(marker, f"{env}=1 runs them") for marker, env in LEFT_TO_THE_NIGHTLY.items()
              if os.environ.get(env) != "1"]
    if not require_gpu(config) and any(item.get_closest_marker(GPU_MARKER) for item in items):
        from harness.gpus import gpu_present

        if not gpu_present():
            wanted.append((GPU_MARKER, NO_GPU))
    counts = {f"{marker} ({runs})": 0 for marker, runs in wanted}  # in this order
    keep, drop = [], []
    for item in items:
        why = next((w for w in wanted if item.get_closest_marker(w[0]) is not None), None)
        if why is None:
            keep.append(item)
            continue
        drop.append(item)
        label = f"{why[0]} ({why[1]})"
        counts[label] += 1
    counts = {label: n for label, n in counts.items() if n}
    config.stash[DESELECTED] = counts
    if hasattr(config, "workeroutput"):
        config.workeroutput[WORKER_OUTPUT] = counts
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001 (pytest-xdist's hook)
    """pytest-xdist: a worker's counts of the tests it deselected (every worker collects the
    same tests, so one worker's counts are the run's)."""
    counts = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
    if counts is not None:
        node.config.stash[DESELECTED] = counts


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    """One line: how many tests were deselected, by why, and what runs them."""
    counts = config.stash.get(DESELECTED, None)
    if counts:
        parts = ", ".join(f"{n} {label}" for label, n in counts.items())
        terminalreporter.write_line(
            f"rnn-harness: {sum(counts.values())} tests deselected: {parts}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """``--require-gpu``: a test marked ``gpu`` that skips fails instead, so that a GPU runner
    cannot pass its GPU tests by skipping them (benchmarks/gpu_check.py's pytest phase)."""
    report = yield
    if (report.skipped and not hasattr(report, "wasxfail") and require_gpu(item.config)
            and item.get_closest_marker(GPU_MARKER) is not None):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"--require-gpu: a GPU test may not skip: {why}"
    return report
