"""Compiled kernels side by side on Python threads, from one pool kept for the process.

The kernels (Numba, ``nogil=True``) release the GIL, so pieces of one job on threads run on
separate cores. Used by the divergence metrics (:func:`harness.metrics_kernel.rows`) and the
large transposed copies of :meth:`harness.layouts.base.Layout.to_native`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_blas = None


def available() -> int:
    """Threads a job may use: as many as BLAS would (``--threads 1`` or ``OMP_NUM_THREADS=1``:
    one)."""
    import numpy  # noqa: F401  (loads the BLAS whose threads are counted)
    from threadpoolctl import ThreadpoolController

    global _blas
    if _blas is None:  # finding the libraries costs ~0.3 ms, reading their count ~10 µs
        _blas = ThreadpoolController().select(user_api="blas")
    return max((lib.num_threads or 1 for lib in _blas.lib_controllers), default=1)


def side_by_side(piece: Callable[[int], None], n: int) -> None:
    """``piece(0)`` .. ``piece(n - 1)``: ``piece(0)`` on this thread, the others on the pool's
    threads at the same time; returns when all are done and raises the first piece's
    exception. The pieces must write to disjoint memory."""
    global _pool, _pool_size
    if n <= 1:
        piece(0)
        return
    if _pool_size < n - 1:
        _pool = ThreadPoolExecutor(n - 1, thread_name_prefix="rnn-harness-kernels")
        _pool_size = n - 1
    done = [_pool.submit(piece, k) for k in range(1, n)]
    try:
        piece(0)
    finally:
        for d in done:
            d.result()
