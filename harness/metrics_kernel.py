"""The divergence metrics of many rows in one pass over an adapter's values and the reference's
(compiled with Numba).

Every element adds its error e = |a − r| to its row::

    max_abs   = max e                          sum_abs = Σ e
    tol_ratio = max e / (|r|·rtol + atol)      (an exact element, e = 0, counts 0)
    max_rel   = max e / max(|r|, eps)
    max_ulp   = max e / ulp(r)                 (ulp from a table indexed by r's exponent field)

A quotient is only computed where it can be a new maximum m: ``e >= m·d`` is tested first (one
product). Rounding is monotone, so fl(e/d) > m implies e/d > m, e > m·d and fl(m·d) <= e: the
test skips no new maximum, and every maximum is the correctly rounded quotient NumPy would
compute (the same bits; ``tests/test_divergence_paths.py``). Only ``sum_abs`` depends on the
order of the elements (the summation order is left to the compiler).

Two shapes of rows:

* :func:`rows`: ``a`` and ``r`` viewed as [P, R1, R2, Q] (any strides), one row per (R1, R2)
  reducing over P and Q;
* :func:`segments`: flat arrays cut at ``starts``, one row per segment.

The kernels have one signature each (float64, any strides), compiled when this module is
first imported (``harness.compare`` imports it on its first divergence) and kept in Numba's
on-disk cache: a process pays ~0.1 s to load them, ~2 s the very first time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness.dtypes import FORMATS

METRICS = ("max_abs", "sum_abs", "tol_ratio", "max_rel", "max_ulp")
MIN_THREADED = 1 << 18  # elements from which rows() runs on several threads (~0.6 ms serial;
# on 2 cores 2 threads are 1.4-1.7x faster from 2**17 on in a loop, but waking the thread
# costs more when a pair runs once, between two forwards: benchmarks/bench_overhead.py)


def ulp_table(dtype: str) -> np.ndarray:
    """[2048] the spacing of ``dtype`` at a float64 whose biased exponent field is the index
    (``harness.dtypes.ulp``: the normal spacing below the format's smallest normal)."""
    fmt = FORMATS[dtype]
    exponent = np.maximum(np.arange(2048) - 1023, fmt.min_exponent)
    with np.errstate(over="ignore"):  # index 2047: inf and NaN, never a finite reference
        return np.ldexp(1.0, exponent) * fmt.eps


_TABLES = {dtype: ulp_table(dtype) for dtype in FORMATS}
_FLAGS = dict(nogil=True, cache=True, error_model="numpy", fastmath={"reassoc"})  # reassoc: sums


@numba.njit(inline="always", error_model="numpy", fastmath={"reassoc"})
def _max_quotient(m, e, d):
    """max(m, e / d) for e > 0, with the quotient computed only when the product test allows
    a new maximum; m itself for e = 0 (d = 0 then gives 0, not 0/0). One exit: an early
    return made the kernel ~1.5x slower."""
    if e >= m * d and e > 0.0:
        x = e / d  # d = 0 (atol = 0 at r = 0): inf
        if x > m:
            m = x
    return m


@numba.njit(inline="always", error_model="numpy", fastmath={"reassoc"})
def _span(a, r, bits, m, table, atol, rtol, eps):
    """The row's metrics ``m`` (max_abs, sum_abs, tol_ratio, max_rel, max_ulp) with the
    elements of 1-D ``a`` and ``r`` (``bits``: r's float64 bits) added."""
    mx, s, mt, mr, mu = m
    for q in range(r.size):
        rv = r[q]
        e = abs(a[q] - rv)
        s += e
        if e > mx:
            mx = e
        ar = abs(rv)
        mt = _max_quotient(mt, e, ar * rtol + atol)
        mr = _max_quotient(mr, e, ar if ar > eps else eps)
        mu = _max_quotient(mu, e, table[(bits[q] >> 52) & 0x7FF])
    return mx, s, mt, mr, mu


@numba.njit("void(f8[:,:,:,:], f8[:,:,:,:], u8[:,:,:,:], f8[:], f8, f8, f8, f8[:,:,:,:])",
            **_FLAGS)
def _rows(a, r, bits, table, atol, rtol, eps, acc):
    """Spans a[x, y, z, :] folded into acc[:, x, y, z] (acc has 0 strides on the reduced
    axis), in the order of the three outer axes."""
    X, Y, Z, _ = r.shape
    for x in range(X):
        for y in range(Y):
            for z in range(Z):
                m = (acc[0, x, y, z], acc[1, x, y, z], acc[2, x, y, z], acc[3, x, y, z],
                     acc[4, x, y, z])
                m = _span(a[x, y, z], r[x, y, z], bits[x, y, z], m, table, atol, rtol, eps)
                for k in range(5):
                    acc[k, x, y, z] = m[k]


@numba.njit("void(f8[:], f8[:], u8[:], i8[:], f8[:], f8, f8, f8, f8[:,:])", **_FLAGS)
def _segments(a, r, bits, starts, table, atol, rtol, eps, out):
    n = starts.size
    for k in range(n):
        lo, hi = starts[k], starts[k + 1] if k + 1 < n else r.size
        m = _span(a[lo:hi], r[lo:hi], bits[lo:hi], (0.0, 0.0, 0.0, 0.0, 0.0), table, atol,
                  rtol, eps)
        for j in range(5):
            out[j, k] = m[j]


_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def _threads(a: np.ndarray) -> int:
    """Threads for one rows() call on ``a`` (outermost axis first): 1 below
    :data:`MIN_THREADED` elements, else as many as BLAS would use (``--threads 1`` or
    ``OMP_NUM_THREADS=1``: one), at most one per index of the outermost axis."""
    if a.size < MIN_THREADED or a.shape[0] < 2:
        return 1
    from harness.reference.parallel import blas_threads

    return min(blas_threads(), a.shape[0])


def rows(a: np.ndarray, r: np.ndarray, dtype: str, atol: float, rtol: float) -> np.ndarray:
    """[5, R1, R2] the :data:`METRICS` of ``a`` against ``r`` (both [P, R1, R2, Q], float64,
    any strides), reducing over P and Q. The spans along Q
    are visited in ``a``'s memory order (an adapter's time-major output is read front to
    back). A large array is cut along its outermost axis into pieces that run side by side on
    threads (the kernel runs without the GIL), each into an accumulator of its own."""
    global _pool, _pool_size
    a, bits = np.asarray(a, dtype=np.float64), r.view(np.uint64)
    P, R1, R2, _ = r.shape
    order = sorted(range(3), key=lambda k: -abs(a.strides[k]))
    outer = (*order, 3)
    a, r, bits = a.transpose(outer), r.transpose(outer), bits.transpose(outer)
    n = _threads(a)
    out = np.zeros((n, 5, R1, R2))
    cuts = [a.shape[0] * k // n for k in range(n + 1)]

    def piece(k: int) -> None:
        lo, hi = cuts[k], cuts[k + 1]
        acc = out[k]  # [5, R1, R2] seen as [5, P, R1, R2] (stride 0 on P), axes ordered as a's
        acc = as_strided(acc, (5, P, R1, R2), (acc.strides[0], 0, *acc.strides[1:]))
        acc = acc.transpose(0, *(x + 1 for x in order))[:, lo:hi]
        _rows(a[lo:hi], r[lo:hi], bits[lo:hi], _TABLES[dtype], atol, rtol, FORMATS[dtype].eps,
              acc)

    if n == 1:
        piece(0)
    else:
        if _pool_size < n - 1:
            _pool = ThreadPoolExecutor(n - 1, thread_name_prefix="rnn-harness-metrics")
            _pool_size = n - 1
        done = [_pool.submit(piece, k) for k in range(1, n)]
        piece(0)  # this thread takes a piece too
        for d in done:
            d.result()
    total = out.max(axis=0)
    total[1] = out[:, 1].sum(axis=0)
    return total


def segments(a: np.ndarray, r: np.ndarray, starts: np.ndarray, dtype: str, atol: float,
             rtol: float) -> np.ndarray:
    """[5, len(starts)] the :data:`METRICS` of flat ``a`` against flat ``r``, one row per
    segment ``[starts[k], starts[k + 1])`` (the last one to the end)."""
    out = np.empty((5, starts.size))
    _segments(np.asarray(a, dtype=np.float64), r, r.view(np.uint64), starts.astype(np.int64),
              _TABLES[dtype], atol, rtol, FORMATS[dtype].eps, out)
    return out
