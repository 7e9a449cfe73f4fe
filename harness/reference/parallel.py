"""The reference forward on several cores, with Python threads.

NumPy releases the GIL inside BLAS calls and inside ufunc loops over non-tiny arrays, which is
where a large case spends its time, so independent work on Python threads runs side by side.
The forward has two kinds of independent work:

* pieces: one direction of one layer over a shard of the batch. A layer's directions are
  independent, and so are the batch rows through the whole network;
* within a piece, the input projection W x + b, a block of timesteps at a time, which the
  recurrence only reads: a helper thread computes it a few blocks ahead
  (``functions.input_projections``).

:func:`plan` gives each piece two threads (recurrence and projection) when there are at least
twice as many threads as directions, else one; pieces are the directions, times batch shards
when threads are left over. On 2 cores: a bidirectional layer runs its two directions side by
side, a unidirectional one its projection beside its recurrence. Every thread uses one BLAS
thread: this beats giving BLAS the cores, since the per-step recurrent product has as few rows
as the batch (8 in seed 000), on which OpenBLAS gets no faster with a second thread
(``benchmarks/bench_reference.py``).

Each piece and each block computes exactly what it computes in the serial run, on fewer rows
for a shard: the results are the same bits except where a matrix product over fewer rows
sums in another order in BLAS (within 4e-15, ``tests/test_reference_parallel.py``).

As many threads as BLAS would use (``--threads 1`` or ``OMP_NUM_THREADS=1``: one, the serial
path, which starts no thread and leaves BLAS alone); one for CuPy arrays, and for pieces below
the size threshold (:data:`MIN_ROWS`, ``MIN_HIDDEN``, ``MIN_ROWS_HIDDEN2``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

MIN_ROWS, MIN_HIDDEN, MIN_ROWS_HIDDEN2 = 4, 128, 2**18
"""A piece (a direction over some batch rows) is worth a thread of its own from MIN_ROWS rows,
MIN_HIDDEN units and rows x hidden² (the recurrent product's multiply-adds per gate and step)
of MIN_ROWS_HIDDEN2 on. Measured on 2 cores (``benchmarks/bench_reference.py --threshold``):
below, a time step is mostly NumPy's call overhead, which holds the GIL, so two threads take
turns at it (up to 1.5x slower than one at B = 8, H = 64), or BLAS's own threads already do
well: on a memory-bound recurrent product with 1 or 2 rows (1.5-1.9x slower at B = 2,
H = 512), or on a product with many rows (1.2-1.3x slower at B = 128, H = 64). ``tests/``
cases (H <= 32) stay serial."""


@dataclass(frozen=True)
class Plan:
    """How the forward is spread over threads: ``shards`` contiguous batch shards per
    direction, each (direction, shard) piece on a thread of its own when ``threads`` > 1, and
    with its input projection on a helper thread when ``ahead``."""

    threads: int = 1
    shards: int = 1
    ahead: bool = False

    def row_shards(self, batch: int) -> list[slice]:
        bounds = [batch * j // self.shards for j in range(self.shards + 1)]
        return [slice(bounds[j], bounds[j + 1]) for j in range(self.shards)]


SERIAL = Plan()


def plan(x: np.ndarray, batch: int, directions: int, hidden: int) -> Plan:
    """The plan for the forward of ``x`` (NumPy or CuPy) with ``directions`` directions and
    ``hidden`` units: :data:`SERIAL` for CuPy arrays, one BLAS thread, or small pieces."""
    if not isinstance(x, np.ndarray):
        return SERIAL
    threads = blas_threads()
    if threads < 2:
        return SERIAL
    ahead = threads >= 2 * directions
    shards = max(1, min(batch, threads // (2 * directions if ahead else directions)))
    rows = batch // shards
    if rows < MIN_ROWS or hidden < MIN_HIDDEN or rows * hidden**2 < MIN_ROWS_HIDDEN2:
        return SERIAL
    return Plan(threads, shards, ahead)


Piece = Callable[[Executor | None], None]
"""One direction of one layer over some batch rows, called with its helper (or None)."""


@contextlib.contextmanager
def workers(plan: Plan) -> Iterator[Callable[[Sequence[Piece]], None]]:
    """A function running pieces as ``plan`` says, valid inside the ``with`` block. A piece is
    called with its helper executor (None without ``ahead``); pieces must be independent (they
    write into disjoint arrays). BLAS has one thread inside the block (all of the process's
    BLAS calls: the limit is process-wide), except for :data:`SERIAL`, which leaves it alone."""
    if plan == SERIAL:
        def serial(pieces: Sequence[Piece]) -> None:
            for piece in pieces:
                piece(None)

        yield serial
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(_blas_limited_to(1))
        n = plan.threads // (2 if plan.ahead else 1)  # pieces running at once
        pool = stack.enter_context(ThreadPoolExecutor(n)) if n > 1 else None
        helpers = [stack.enter_context(ThreadPoolExecutor(1)) if plan.ahead else None
                   for _ in range(n)]

        def run(pieces: Sequence[Piece]) -> None:
            if pool is None:
                for piece in pieces:
                    piece(helpers[0])
                return
            # piece j with helper j mod n: plan() makes no more pieces than n (pieces sharing
            # a helper would only take turns at it)
            done = [pool.submit(piece, helpers[j % n]) for j, piece in enumerate(pieces)]
            for d in done:
                d.result()  # a piece's exception is raised here

        yield run


_blas = None


def _blas_controller():
    """threadpoolctl's controller of the BLAS libraries loaded (NumPy's among them), made once:
    finding the libraries costs ~0.3 ms, reading or setting their thread count ~10 µs."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController().select(user_api="blas")
    return _blas


def blas_threads() -> int:
    """The thread count NumPy's BLAS would use now (the largest among the BLAS libraries)."""
    return max((lib.num_threads or 1 for lib in _blas_controller().lib_controllers), default=1)


def _blas_limited_to(n: int):
    return _blas_controller().limit(limits=n)
