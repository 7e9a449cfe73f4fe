"""Mutation test: planted implementation bugs in torch-cpu (tests/support/mutants.py) run through
the bundled cases with default options must be DIVERGED wherever they move the outputs beyond
max(100x the clean pair's error, 10x atol), and the clean adapter must diverge on none.

Each case is prepared once and its clean run shared by its mutants; everything runs in this
process through :func:`harness.pairs.run_pair`, what ``run`` does per pair."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from support.mutants import CATALOGUE, kill_rate, trials  # noqa: E402

from harness import compare  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return trials()


def test_every_planted_bug_that_moves_the_outputs_is_diverged(results):
    _, found = results
    escaped = [f"{t.bug} on {t.case}: {t.status}, moved {t.moved:.2g} > {t.threshold:.2g} "
               f"({t.reason})" for t in found if t.must_kill and not t.killed]
    killed, must = kill_rate(found)
    assert not escaped, f"kill rate {killed}/{must}; escaped:\n" + "\n".join(escaped)


def test_every_planted_bug_is_exercised_by_some_bundled_case(results):
    """A bug that no bundled case can see would make its kill rate vacuous."""
    _, found = results
    seen = {t.bug for t in found if t.must_kill}
    assert seen == set(CATALOGUE), f"not exercised: {sorted(set(CATALOGUE) - seen)}"


def test_no_planted_bug_crashes_the_run(results):
    _, found = results
    assert not [t for t in found if t.status == compare.ERROR]


def test_the_correct_adapter_passes_every_bundled_case(results):
    clean, _ = results
    assert [p.case for p in clean if p.status == compare.DIVERGED] == []
