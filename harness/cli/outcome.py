"""How ``run`` and ``merge`` end: the pairs counted by status, and exit 1 for a run that
compared nothing or no framework."""

from __future__ import annotations

import sys


def counts(pairs: list) -> str:
    by_status: dict[str, int] = {}
    for p in pairs:
        by_status[p.status] = by_status.get(p.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(by_status.items())) or "no pairs"


def compared_anything(pairs: list) -> bool:
    """A run in which no pair compared anything (every pair a baseline, not applicable or
    unavailable, or no pair at all) tested nothing: it says so and exits 1, never 0."""
    from harness.compare import COMPARED

    if any(p.status in COMPARED for p in pairs):
        return True
    statuses = sorted({p.status for p in pairs})
    print(f"rnn-harness: nothing was compared: {len(pairs)} pair(s)"
          + (f", all {' or '.join(statuses)}" if statuses else "")
          + "; choose adapters (--adapters, --device, the cases' adapters/exclude) that can run "
            "here", file=sys.stderr)
    return False


def tested_a_framework(result) -> bool:
    """A run whose only compared pairs are of the harness's own references tested no framework
    (:attr:`harness.results.RunResult.compared_no_framework`): vacuous, it says so and exits 1
    as a vacuous case does."""
    from harness.report.summary import NO_FRAMEWORK

    if not result.compared_no_framework:
        return True
    print(f"rnn-harness: vacuous: {NO_FRAMEWORK}; add a framework's adapter (--adapters)",
          file=sys.stderr)
    return False
