"""The options of a run (:func:`harness.runner.run`; ``rnn-harness run``'s flags), with their
defaults in one place."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.shard import Shard

STEP_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class RunOptions:
    """How a run runs its pairs. Picklable: ``--jobs`` workers get it whole."""

    # seconds a pair may run before it is an error row (None: no limit)
    timeout: float | None = None
    # each adapter in a worker process (harness.isolation): a hang or a crash costs one pair
    isolate: bool = False
    # bytes a case may need (None: harness.memory.max_memory()); a harness.memory.MemoryLimit
    # (an int with the GPU limit too) is also recorded in the result, for run.json
    max_memory: int | None = None
    # keep each pair's outputs in its PairResult (``run --save-outputs``)
    keep_outputs: bool = False
    # run only this shard's pairs (harness.shard)
    shard: Shard | None = None
    # worker processes running cases side by side (1: all in this process)
    jobs: int = 1
    # when pairs also get step-local rows: auto | on | off (harness.judges.Judge.wants_steps)
    step_mode: str = "auto"
    # cpu | gpu | all, as ``--device``: on gpu each case's float64 reference and noise floor are
    # computed on the GPU where torch sees one (harness.prepare.prepare)
    device: str = "all"
    # a reproducer record for each DIVERGED, error (with outputs) or known-bug pair, which the
    # report writes as repro/<case>/<adapter>/ (harness/repro/; ``run --no-repro``: none)
    repro: bool = True
    # the adapters named explicitly (``--adapters``, check()'s ``adapters``: harness.plan's
    # Plan.named, ``all`` left out): a named-only adapter (Adapter.named_only) runs on every
    # case there, else only on the cases whose ``adapters:`` name it. None: every adapter
    # handed to the run counts as named
    named: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise HarnessError(f"expected a number of worker processes >= 1, got {self.jobs}",
                               field="--jobs")
