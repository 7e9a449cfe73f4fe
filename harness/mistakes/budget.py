"""The time allowance of a search over mistakes and its count of hypotheses run.

One object owns both, so a search asks it rather than reading a clock and bumping a counter in
each of its loops; the doctor reports what it holds (hypotheses tried, stopped at the budget).
"""

from __future__ import annotations

import math
import time


class Budget:
    """``seconds`` from the last :meth:`restart` (unbounded by default), the hypotheses counted
    since the object was made, and whether a search stopped because the time ran out."""

    def __init__(self, seconds: float = math.inf) -> None:
        self.evaluated = 0
        self.stopped = False
        self.restart(seconds)

    def restart(self, seconds: float) -> None:
        """A new allowance of ``seconds`` from now; the count and :attr:`stopped` are kept."""
        self.seconds = seconds
        self._start = time.perf_counter()

    def count(self, n: int = 1) -> None:
        self.evaluated += n

    def expired(self, share: float = 1.0) -> bool:
        """Whether more than ``share`` of the allowance has passed (a stage that may use only
        part of it asks with ``share`` < 1)."""
        return time.perf_counter() - self._start > self.seconds * share

    def stop_if_expired(self) -> bool:
        """:meth:`expired`, recorded in :attr:`stopped` (the search is incomplete and says so)."""
        if self.expired():
            self.stopped = True
            return True
        return False
