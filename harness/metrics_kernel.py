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

The elements go by in blocks of :data:`BLOCK`. A block is first read with the row's maxima held
fixed: the sum, and whether any element passes any of the four tests (``e > max_abs`` and the
three products). That pass has no branch and compiles to SIMD instructions; the ULP in it is
made from r's exponent bits (:func:`_ulp_bits`, 0 where the spacing is not a normal float64,
which lets every such element through). Only a block with an element through is read again,
element by element, updating the maxima as above. Past a row's first elements few blocks are
(on an adapter's y ~8 % of blocks of 32 were), so a row costs about one SIMD pass: 2-3x
faster than testing every element in turn.

Two shapes of rows:

* :func:`rows`: ``a`` and ``r`` viewed as [P, R1, R2, Q] (any strides), one row per (R1, R2)
  reducing over P and Q;
* :func:`segments`: flat arrays cut at ``starts``, one row per segment.

The kernels have one signature each (float64; flat contiguous arrays, with the strides of
``rows()``'s outer axes in elements: any strides of the caller's arrays come down to those),
compiled when this module is first imported (``harness.compare`` imports it on its first
divergence) and kept in Numba's on-disk cache: a process pays ~0.1 s to load them, ~2 s the
very first time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numba import types
from numba.core.extending import intrinsic
from numpy.lib.stride_tricks import as_strided

from harness.dtypes import FORMATS
from harness.threads import available, side_by_side

METRICS = ("max_abs", "sum_abs", "tol_ratio", "max_rel", "max_ulp")
BLOCK = 16  # elements per block: a constant trip count the compiler turns into SIMD code
# (two AVX-512 vectors). 32 was 10-25 % slower (a block through a test is read again element
# by element: more elements each time), 8 2-4x slower (the pass's reduction per vector):
# benchmarks/bench_overhead.py's y rows and seed 000's [8, 1000, 2, 320] y
MIN_THREADED = 1 << 18  # elements from which rows() runs on several threads (on 2 cores 2
# threads were faster from 2**17 on in a loop, but waking the thread costs more when a pair
# runs once, between two forwards: benchmarks/bench_overhead.py)


R_COPY_MAX_BYTES = 16 * 2**20  # a memo keeps r in a's axis order up to this size: both read
# front to back (an adapter's time-major y against the batch-major reference: 0.70 -> 0.58 ms
# right after a forward, benchmarks/bench_overhead.py's mid-lstm; the same in a hot loop)


def ulp_table(dtype: str) -> np.ndarray:
    """[2048] the spacing of ``dtype`` at a float64 whose biased exponent field is the index
    (``harness.dtypes.ulp``: the normal spacing below the format's smallest normal)."""
    fmt = FORMATS[dtype]
    exponent = np.maximum(np.arange(2048) - 1023, fmt.min_exponent)
    with np.errstate(over="ignore"):  # index 2047: inf and NaN, never a finite reference
        return np.ldexp(1.0, exponent) * fmt.eps


_TABLES = {dtype: ulp_table(dtype) for dtype in FORMATS}
_JIT = dict(error_model="numpy", fastmath={"reassoc"})  # reassoc: the sums only
_FLAGS = dict(nogil=True, cache=True, **_JIT)


@intrinsic
def _bits(typingctx, x):
    """The bits of float64 ``x`` as an int64 (a register move)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, k):
    """The float64 whose bits are int64 ``k``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@numba.njit(inline="always", **_JIT)
def _ulp_bits(ar, emin, digits):
    """The spacing at ``ar`` >= 0 of a format with ``digits`` fraction bits and smallest
    normal exponent field ``emin`` (biased as float64's), from the exponent bits: the table's
    value where that is a normal float64, else 0 (never above the table's)."""
    k = max(_bits(ar) >> 52, emin) - digits
    return _float(k << 52) if k > 0 else 0.0


@numba.njit(inline="always", **_JIT)
def _max_quotient(m, e, d):
    """max(m, e / d) for e > 0, with the quotient computed only when the product test allows
    a new maximum; m itself for e = 0 (d = 0 then gives 0, not 0/0). One exit: an early
    return made the kernel ~1.5x slower."""
    if e >= m * d and e > 0.0:
        x = e / d  # d = 0 (atol = 0 at r = 0): inf
        if x > m:
            m = x
    return m


@numba.njit(inline="always", **_JIT)
def _may_raise(e, ar, mx, mt, mr, mu, atol, rtol, eps, emin, digits):
    """Whether error ``e`` at |r| = ``ar`` passes any of the four tests against the maxima
    (max_abs, and the products of the three quotients); branch-free, for the SIMD pass."""
    return ((e > mx) | (e >= mt * (ar * rtol + atol)) | (e >= mr * (ar if ar > eps else eps))
            | (e >= mu * _ulp_bits(ar, emin, digits)))


@numba.njit(inline="always", **_JIT)
def _span(a, r, m, table, atol, rtol, eps, emin, digits):
    """The row's metrics ``m`` (max_abs, sum_abs, tol_ratio, max_rel, max_ulp) with the
    elements of ``a`` and ``r`` added (1-D, contiguous; n from r.size, not passed in: the
    compiler then knows every index is in bounds, which the SIMD code needs)."""
    mx, s, mt, mr, mu = m
    n = r.size
    full = n - n % BLOCK
    for q0 in range(0, n, BLOCK):
        hit = False  # any element of the block through a test, with the maxima held fixed
        if q0 < full:
            for j in range(BLOCK):  # a constant trip count: SIMD code
                e = abs(a[q0 + j] - r[q0 + j])
                s += e
                hit |= _may_raise(e, abs(r[q0 + j]), mx, mt, mr, mu, atol, rtol, eps, emin,
                                  digits)
        else:
            for q in range(q0, n):
                e = abs(a[q] - r[q])
                s += e
                hit |= _may_raise(e, abs(r[q]), mx, mt, mr, mu, atol, rtol, eps, emin, digits)
        if hit:  # again, element by element
            for q in range(q0, min(q0 + BLOCK, n)):
                rv = r[q]
                e = abs(a[q] - rv)
                if e > mx:
                    mx = e
                ar = abs(rv)
                mt = _max_quotient(mt, e, ar * rtol + atol)
                mr = _max_quotient(mr, e, ar if ar > eps else eps)
                mu = _max_quotient(mu, e, table[_bits(ar) >> 52])
    return mx, s, mt, mr, mu


@numba.njit("void(f8[::1], f8[::1], i8[:,::1], i8[::1], i8, i8, f8[:], f8, f8, f8, i8, i8, "
            "f8[:,::1])", **_FLAGS)
def _rows(a, r, steps, shape, x0, x1, table, atol, rtol, eps, emin, digits, acc):
    """Spans [x, y, z, :] of ``a`` and ``r`` for x0 <= x < x1, folded into acc[:, row], in the
    order of the outer axes. ``a``, ``r``: flat, their three outer axes at the strides (in
    elements) ``steps[0]``, ``steps[1]``, the last axis contiguous; ``steps[2]``: the strides
    of the rows in ``acc`` (0 on the reduced axis)."""
    _, Y, Z, Q = shape
    sa, sr, sc = steps[0], steps[1], steps[2]
    for x in range(x0, x1):
        for y in range(Y):
            for z in range(Z):
                ao, ro = x * sa[0] + y * sa[1] + z * sa[2], x * sr[0] + y * sr[1] + z * sr[2]
                row = x * sc[0] + y * sc[1] + z * sc[2]
                m = (acc[0, row], acc[1, row], acc[2, row], acc[3, row], acc[4, row])
                m = _span(a[ao:ao + Q], r[ro:ro + Q], m, table, atol, rtol, eps, emin, digits)
                for k in range(5):
                    acc[k, row] = m[k]


@numba.njit("void(f8[::1], f8[::1], i8[:], f8[:], f8, f8, f8, i8, i8, f8[:,:])", **_FLAGS)
def _segments(a, r, starts, table, atol, rtol, eps, emin, digits, out):
    n = starts.size
    for k in range(n):
        lo, hi = starts[k], starts[k + 1] if k + 1 < n else r.size
        m = _span(a[lo:hi], r[lo:hi], (0.0, 0.0, 0.0, 0.0, 0.0), table, atol, rtol, eps, emin,
                  digits)
        for j in range(5):
            out[j, k] = m[j]


def _format(dtype: str) -> tuple:
    """(table, eps, emin, digits) of ``dtype`` for the kernels."""
    fmt = FORMATS[dtype]
    return _TABLES[dtype], fmt.eps, fmt.min_exponent + 1023, fmt.mantissa_bits


@dataclass(frozen=True)
class _Call:
    """What a rows() call needs besides the values of ``a``, the same for every ``a`` of one
    shape and strides against one ``r`` (kept by the caller: ``memo``). ``order``: a's axes,
    outer ones by falling stride; ``copy``: a is copied first (its last axis not contiguous, a
    negative stride); ``extent``: elements of a's flat view (0: a reshape will do)."""

    order: tuple[int, ...]
    copy: bool
    extent: int
    fr: np.ndarray  # r, flat, in a's order (a copy in that order where kept and small)
    steps: np.ndarray  # [3, 3]: strides in elements of a, r and the accumulator's rows
    shape: np.ndarray
    threads: int


def _steps(x: np.ndarray) -> tuple[bool, int, list[int]]:
    """(copy, extent, outer strides in elements) of a non-empty [X, Y, Z, Q] float64 array:
    its memory is read through a 1-D contiguous view from its first element (extent elements;
    0: it is C-contiguous, a reshape), or it is copied first where its last axis is not
    contiguous or a stride is negative."""
    copy = not x.flags.c_contiguous and ((x.shape[3] > 1 and x.strides[3] != 8)
                                         or min(x.strides) < 0 or any(s % 8 for s in x.strides))
    if copy:
        x = np.empty(x.shape)  # the layout of the copy (nothing is written)
    steps = [s // 8 if n > 1 else 0 for n, s in zip(x.shape, x.strides, strict=True)]
    extent = 0 if x.flags.c_contiguous else 1 + sum(
        (n - 1) * s for n, s in zip(x.shape, steps, strict=True))
    return copy, extent, steps[:3]


def _flat(x: np.ndarray, copy: bool, extent: int) -> np.ndarray:
    """The 1-D view (or copy) of ``x`` that :func:`_steps` describes."""
    if copy:
        return np.ascontiguousarray(x).reshape(-1)
    return x.reshape(-1) if extent == 0 else as_strided(x, (extent,), (8,))


def _call(a: np.ndarray, r: np.ndarray, kept: bool) -> _Call:
    """``kept``: the call is kept in a memo, so r in a's order (up to R_COPY_MAX_BYTES) is
    worth a copy."""
    P, R1, R2, _ = r.shape
    order = (*sorted(range(3), key=lambda k: -abs(a.strides[k])), 3)
    a, r = a.transpose(order), r.transpose(order)
    if kept and not r.flags.c_contiguous and r.nbytes <= R_COPY_MAX_BYTES:
        r = np.ascontiguousarray(r)  # read front to back beside a
    copy, extent, sa = _steps(a)
    r_copy, r_extent, sr = _steps(r)
    sc = (0, R2, 1)  # a row's place in the accumulator along P, R1, R2
    return _Call(order, copy, extent, _flat(r, r_copy, r_extent),
                 np.array([sa, sr, [sc[k] for k in order[:3]]], dtype=np.int64),
                 np.array(a.shape, dtype=np.int64), _threads(a))


def _threads(a: np.ndarray) -> int:
    """Threads for one rows() call on ``a`` (outermost axis first): 1 below
    :data:`MIN_THREADED` elements, else as many as BLAS would use (``--threads 1`` or
    ``OMP_NUM_THREADS=1``: one), at most one per index of the outermost axis."""
    if a.size < MIN_THREADED or a.shape[0] < 2:
        return 1
    return min(available(), a.shape[0])


def rows(a: np.ndarray, r: np.ndarray, dtype: str, atol: float, rtol: float,
         memo: dict | None = None) -> np.ndarray:
    """[5, R1, R2] the :data:`METRICS` of ``a`` against ``r`` (both [P, R1, R2, Q], float64,
    any strides), reducing over P and Q. The spans along Q are visited in ``a``'s memory order
    (an adapter's time-major output is read front to back). A large array is cut along its
    outermost axis into pieces that run side by side on threads (the kernel runs without the
    GIL), each into an accumulator of its own. ``memo``: a dict kept with ``r`` for the calls
    against it (what does not depend on a's values is worked out once per a's layout)."""
    a = np.asarray(a, dtype=np.float64)
    P, R1, R2, _ = r.shape
    if a.size == 0:
        return np.zeros((5, R1, R2))
    key = (a.shape, a.strides)
    call = memo.get(key) if memo is not None else None
    if call is None:
        call = _call(a, r, memo is not None)
        if memo is not None:
            memo[key] = call
    fa = _flat(a.transpose(call.order), call.copy, call.extent)
    table, eps, emin, digits = _format(dtype)
    n = call.threads
    out = np.zeros((n, 5, R1 * R2))
    X = call.shape[0]

    def piece(k: int) -> None:
        _rows(fa, call.fr, call.steps, call.shape, X * k // n, X * (k + 1) // n, table, atol,
              rtol, eps, emin, digits, out[k])

    if n == 1:
        piece(0)
        return out[0].reshape(5, R1, R2)
    side_by_side(piece, n)
    total = out.max(axis=0)
    total[1] = out[:, 1].sum(axis=0)
    return total.reshape(5, R1, R2)


def segments(a: np.ndarray, r: np.ndarray, starts: np.ndarray, dtype: str, atol: float,
             rtol: float) -> np.ndarray:
    """[5, len(starts)] the :data:`METRICS` of flat ``a`` against flat ``r``, one row per
    segment ``[starts[k], starts[k + 1])`` (the last one to the end)."""
    out = np.empty((5, starts.size))
    table, eps, emin, digits = _format(dtype)
    _segments(np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(r),
              starts.astype(np.int64), table, atol, rtol, eps, emin, digits, out)
    return out
