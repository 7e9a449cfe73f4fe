"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

from collections.abc import Callable

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

# marker -> (the variable that runs its tests, why they skip without it)
LEFT_TO_THE_NIGHTLY = {
    "roads": (ROADS_ENV, "a road left out of the default selection for cost"),
    "nightly": (NIGHTLY_ENV, "whole processes of the frameworks (a benchmark script's smoke "
                             "run, the determinism of three whole runs, TensorFlow's native "
                             "log lines)"),
}


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``roads`` (the adapters that run only when named, each test a compile or
    a conversion of seconds to minutes) and ``nightly`` (the benchmark scripts' smoke runs,
    the determinism of whole runs, TensorFlow's log lines) skip, saying so, unless their
    variable is 1: the nightly runs them, as it runs those adapters; the default test run
    stays within its budget."""
    import os

    for marker, (env, why) in LEFT_TO_THE_NIGHTLY.items():
        if os.environ.get(env) == "1":
            continue
        skip = pytest.mark.skip(reason=f"{why}: {env}=1 runs it (the nightly does)")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)
