"""Progress on the terminal: a run's events (:mod:`harness.run_events`) rendered as lines,
with pairs done of total, the pair running now and the time left.

The default display (:class:`RunDisplay`) is one progress bar on a terminal and, above it (and
alone where stderr is not a terminal), a line for each pair that needs a look. ``run --verbose``
has :class:`RunProgress`, which turns every event into a line for a line sink, by default
:data:`plain_progress` (:class:`StderrProgress`), or any callable taking a ``str``.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

from harness import compare
from harness.results import PairResult
from harness.run_events import (
    CaseFailed,
    PairFinished,
    PairStarted,
    RunEnded,
    RunEvent,
    RunStarted,
)

Progress = Callable[[str], None]
"""A line sink: called with one line per finished pair (and per case that could not be
prepared). One that also has ``started(line)`` is told which pair runs now, and ``close()``
when the run ends."""


class ProgressLine(str):
    """A progress line that also carries the status it reports (a plain ``str`` to callbacks
    that don't care), so a terminal display can keep DIVERGED and error lines on screen."""

    status: str = ""

    def __new__(cls, text: str, status: str = "") -> ProgressLine:
        line = super().__new__(cls, text)
        line.status = status
        return line


class StderrProgress:
    """Progress on stderr (``plain_progress``).

    Not a terminal (CI logs, files): one plain line per finished pair. A terminal: a single line
    rewritten in place (carriage return) with pairs done of total, the pair running now and the time
    left; DIVERGED and error results are printed above it as lines of their own.
    """

    ATTENTION = (compare.DIVERGED, compare.ERROR, compare.LOOKS_FIXED)

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream  # None: sys.stderr when called, so redirection and capture work
        self._live = False  # a status line is on screen

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _tty(self) -> bool:
        return _is_tty(self.stream)

    def _status(self, line: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write("\r" + line[:width] + "\x1b[K")
        self.stream.flush()
        self._live = True

    def __call__(self, line: str) -> None:
        if not self._tty():
            print(line, file=self.stream, flush=True)
        elif getattr(line, "status", "") in self.ATTENTION:
            self.close()
            print(line, file=self.stream, flush=True)
        else:
            self._status(line)

    def started(self, line: str) -> None:
        if self._tty():
            self._status(line)

    def close(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._live = False


plain_progress = StderrProgress()


def duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# No estimate before this many pairs are done: the first pairs pay the framework imports
# (seconds each) and would make an 11 s run announce minutes left.
ETA_AFTER = 3


def time_left(finished: list[float], total: int) -> str:
    """Pairs left times the time per pair over the later half of the pairs done (the first ones
    carry the imports); unknown before ``ETA_AFTER`` pairs. ``finished``: the perf_counter
    time each pair ended, in order."""
    done = len(finished)
    if done >= total:
        return "~0s left"
    if done < ETA_AFTER:
        return "time left unknown"
    half = done // 2
    per_pair = (time.perf_counter() - finished[half - 1]) / (done - half)
    return f"~{duration(per_pair * (total - done))} left"


def describe(r: PairResult) -> str:
    """A pair's result in a few words: the verdict, with the worst or first diverging row.

    A verdict need not rest on a row: a quantized pair is DIVERGED by its SQNR (the case's
    ``min_sqnr_db`` floor, or its cost beyond an ideal quantization's) with every row within
    tolerance, and a known upstream crash has no outputs at all. Such a pair is described by
    its reason, which says what decided it."""
    w = r.worst
    if r.status == compare.PASS and w is not None:
        return (f"pass  max_abs {w['max_abs']:.2e} ({w['tol_ratio']:.2g}x tolerance) "
                f"{r.seconds:.2f}s")
    f = r.first_diverging
    if r.status in (compare.DIVERGED, compare.KNOWN_BUG) and f is not None:
        known = f"{r.status}: " if r.status == compare.KNOWN_BUG else ""
        return (f"{known}DIVERGED first at {compare.where(f)}: max_abs {f['max_abs']:.2e} "
                f"({f['tol_ratio']:.3g}x tolerance)")
    return f"{r.status}" + (f": {r.reason}" if r.reason else "")


class RunProgress:
    """A run's listener (:func:`harness.runner.run`'s ``on_event``) that tells ``lines`` a
    line per finished pair, ``[done/total] case::adapter  result  (time left)``, and, where
    ``lines`` has ``started``, which pair runs now; ``lines.close()`` when the run ends."""

    def __init__(self, lines: Progress = plain_progress) -> None:
        self.lines = lines
        self.total = 0
        self.start = time.perf_counter()
        self.finished: list[float] = []  # when each pair ended, for the time left

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.total, self.start, self.finished = event.pairs, time.perf_counter(), []
        elif isinstance(event, CaseFailed):  # its pairs are done: error rows
            self.finished += [time.perf_counter()] * len(event.adapters)
            self.lines(ProgressLine(f"[{len(self.finished)}/{self.total}] {event.case}: error: "
                                    f"{event.error}", compare.ERROR))
        elif isinstance(event, PairStarted):
            if hasattr(self.lines, "started"):
                so_far = duration(time.perf_counter() - self.start)
                self.lines.started(f"[{len(self.finished)}/{self.total}] running "
                                   f"{event.case}::{event.adapter}  ({so_far} so far, "
                                   f"{time_left(self.finished, self.total)})")
        elif isinstance(event, PairFinished):
            r = event.result
            self.finished.append(time.perf_counter())
            self.lines(ProgressLine(f"[{len(self.finished)}/{self.total}] {r.case}::{r.adapter}  "
                                    f"{describe(r)}  ({time_left(self.finished, self.total)})",
                                    r.status))
        elif isinstance(event, RunEnded):
            if hasattr(self.lines, "close"):
                self.lines.close()


# Pairs that cost next to nothing: settled by the adapter's capabilities or availability
# before anything runs. A time estimate that counted them as pairs would promise far too little.
_FREE = (compare.NOT_APPLICABLE, compare.UNAVAILABLE)


class RunDisplay:
    """The default terminal display of a run (a run's ``on_event``). On a terminal: one
    progress bar (tqdm) with pairs done of total, the pair running now and the time left.
    Above it, and alone where stderr is not a terminal (CI logs, files): a line for each pair
    that needs a look (DIVERGED, an error, a known upstream bug that looks fixed) and each case
    that could not be prepared. Passes, baselines and not-applicable pairs print nothing: the
    last line counts them and the report holds every one.

    The time left counts only the pairs that run: a not-applicable or unavailable pair is
    settled at once, so the pairs left are weighed by the share of pairs that ran so far."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream  # None: sys.stderr when the run starts
        self.bar = None
        self.total = self.done = 0
        self.start = time.perf_counter()
        self.ran: list[float] = []  # when each pair that ran ended

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _say(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def time_left(self) -> str:
        if self.done >= self.total:
            return "~0s left"
        if len(self.ran) < ETA_AFTER:
            return "time left unknown"
        half = len(self.ran) // 2  # the later half: the first pairs carry the imports
        per_pair = (time.perf_counter() - self.ran[half - 1]) / (len(self.ran) - half)
        share = len(self.ran) / max(self.done, 1)
        return f"~{duration(per_pair * (self.total - self.done) * share)} left"

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self.total, self.done, self.ran = event.pairs, 0, []
            self.start = time.perf_counter()
            if _is_tty(self.stream):
                from tqdm import tqdm

                self.bar = tqdm(total=self.total, file=self.stream, leave=False,
                                dynamic_ncols=True, unit="pair",
                                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} pairs{postfix}")
        elif isinstance(event, CaseFailed):
            self.done += len(event.adapters)
            self._say(f"{event.case}: error: {event.error}")
            if self.bar is not None:
                self.bar.update(len(event.adapters))
        elif isinstance(event, PairStarted):
            if self.bar is not None:
                so_far = duration(time.perf_counter() - self.start)
                self.bar.set_postfix_str(f"{event.case}::{event.adapter} ({so_far} so far, "
                                         f"{self.time_left()})")
        elif isinstance(event, PairFinished):
            r = event.result
            self.done += 1
            if r.status not in _FREE:
                self.ran.append(time.perf_counter())
            if r.status in StderrProgress.ATTENTION:
                self._say(f"{r.case}::{r.adapter}  {describe(r)}")
            if self.bar is not None:
                self.bar.update(1)
        elif isinstance(event, RunEnded):
            if self.bar is not None:
                self.bar.close()
                self.bar = None


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a file
        return False
