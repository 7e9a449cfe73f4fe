"""What a run tells as it goes (:func:`harness.runner.run`'s ``on_event``): one frozen
dataclass per kind of event. A case's events come in order (prepared or failed, then each
pair started and finished); with ``--jobs`` the cases' events interleave. A progress display
(:mod:`harness.progress`) renders them; the run itself needs no listener."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.results import PairResult


@dataclass(frozen=True)
class RunStarted:
    """The run begins; ``pairs``: the case x adapter pairs it will report (the shard's)."""

    pairs: int


@dataclass(frozen=True)
class CasePrepared:
    """A case's inputs, reference and noise floor are ready (:func:`harness.prepare.prepare`)."""

    case: str
    seconds: float


@dataclass(frozen=True)
class CaseFailed:
    """A case could not be prepared: each of its pairs (``adapters``) is an error row."""

    case: str
    error: str
    adapters: tuple[str, ...]


@dataclass(frozen=True)
class PairStarted:
    case: str
    adapter: str


@dataclass(frozen=True)
class PairFinished:
    """A pair's result, whatever its status (a crash or a dead worker included)."""

    result: PairResult


@dataclass(frozen=True)
class RunEnded:
    """No more events: the run finished, or stopped on an exception (Ctrl-C)."""


CaseEvent = CasePrepared | CaseFailed | PairStarted | PairFinished
"""The events of one case, as the code running it (here or in a ``--jobs`` worker) yields them."""

RunEvent = RunStarted | CaseEvent | RunEnded

Listener = Callable[[RunEvent], None]
