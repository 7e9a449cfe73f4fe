"""The compiled one-pass metrics kernel against whole-array NumPy on awkward values: zeros,
subnormals, exact elements, errors from 1e-300 to 1e300, a zero absolute tolerance, strided
views. The maxima must be the same bits as NumPy's quotients; the sums agree to rounding."""

from __future__ import annotations

import numpy as np
import pytest

from harness import metrics_kernel
from harness.dtypes import FORMATS, ulp


def numpy_metrics(a, r, dtype, atol, rtol, axes):
    """max_abs, sum_abs, tol_ratio, max_rel, max_ulp over ``axes``, straight from the
    definitions (an exact element counts 0 in every ratio)."""
    e = np.abs(a - r)
    ar = np.abs(r)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratios = [e / (ar * rtol + atol), e / np.maximum(ar, FORMATS[dtype].eps),
                  e / ulp(r, dtype)]
    ratios = [np.where(e == 0, 0.0, x) for x in ratios]
    return np.stack([e.max(axis=axes), e.sum(axis=axes)] + [x.max(axis=axes) for x in ratios])


def awkward(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    fmt = FORMATS[dtype]
    top = 4 if dtype == "float16" else 6
    r = rng.standard_normal(shape) * 10.0 ** rng.integers(-top, top, shape)
    flat = r.reshape(-1)
    n = flat.size
    flat[rng.choice(n, n // 10, replace=False)] = 0.0
    flat[rng.choice(n, n // 20, replace=False)] = fmt.tiny * rng.uniform(-1, 1, n // 20)
    flat[rng.choice(n, n // 50, replace=False)] = 5e-324  # float64's smallest subnormal
    r = r.astype(fmt.numpy).astype(np.float64) if dtype != "float64" else r
    a = r + np.abs(r) * 1e-6 * rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 3, shape)
    a = a.reshape(-1)
    a[rng.choice(n, n // 4, replace=False)] = r.reshape(-1)[rng.choice(n, n // 4)]
    a[rng.choice(n, n // 100, replace=False)] += rng.choice([1e-300, 1e-30, 1e30, 1e300],
                                                            n // 100)
    a.reshape(shape)[0, 0, 0, :3] = r[0, 0, 0, :3]  # an exact element at a row start
    return a.reshape(shape), r


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
@pytest.mark.parametrize("atol, rtol", [(1e-5, 1e-5), (0.0, 1e-3), (1e-7, 0.0)])
def test_rows_are_numpy_metrics_bit_for_bit(dtype, atol, rtol):
    a, r = awkward((7, 5, 3, 33), dtype, seed=len(dtype))
    got = metrics_kernel.rows(a, r, dtype, atol, rtol)
    want = numpy_metrics(a, r, dtype, atol, rtol, axes=(0, 3))
    for k in (0, 2, 3, 4):
        np.testing.assert_array_equal(got[k], want[k], err_msg=metrics_kernel.METRICS[k])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)
    assert np.isinf(got[2]).any() if atol == 0 else np.isfinite(got[2]).all()


def test_rows_read_any_strides():
    a, r = awkward((6, 4, 2, 20), "float32", seed=1)
    a_t = np.asfortranarray(a)  # an adapter may return transposed views
    r_t = np.ascontiguousarray(r.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0)
    got = metrics_kernel.rows(a_t[::2], r_t[::2], "float32", 1e-5, 1e-5)
    want = numpy_metrics(a[::2], r[::2], "float32", 1e-5, 1e-5, axes=(0, 3))
    np.testing.assert_array_equal(got[[0, 2, 3, 4]], want[[0, 2, 3, 4]])


def test_segments_are_numpy_metrics_per_segment():
    a, r = awkward((1, 1, 1, 1000), "float16", seed=5)
    a, r = a.ravel(), r.ravel()
    starts = np.array([0, 1, 400, 401, 999])
    got = metrics_kernel.segments(a, r, starts, "float16", 1e-3, 1e-3)
    bounds = list(starts) + [r.size]
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False)):
        want = numpy_metrics(a[lo:hi], r[lo:hi], "float16", 1e-3, 1e-3, axes=0)
        np.testing.assert_array_equal(got[[0, 2, 3, 4], k], want[[0, 2, 3, 4]])
        np.testing.assert_allclose(got[1, k], want[1], rtol=1e-13)


def test_exact_outputs_give_zero_even_with_zero_tolerance():
    """a == r with atol = rtol = 0: every ratio is 0 (not 0/0)."""
    r = np.zeros((2, 3, 1, 4))
    r[0, 0, 0, 0] = 1.5
    got = metrics_kernel.rows(r.copy(), r, "float32", 0.0, 0.0)
    assert not got.any()


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_ulp_table_is_ulp_at_every_exponent(dtype):
    x = np.ldexp(1.5, np.arange(-1074, 1024))
    x = x[np.isfinite(x)]
    idx = (x.view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)
    np.testing.assert_array_equal(metrics_kernel.ulp_table(dtype)[idx], ulp(x, dtype))


@pytest.mark.parametrize("q", [1, 31, 32, 64, 100])
def test_blocks_and_remainders_of_every_length(q):
    """Spans shorter than a block, exactly one, several, and with a remainder: the SIMD
    pre-pass and the element-by-element pass agree with NumPy wherever a row's maximum is."""
    a, r = awkward((5, 3, 2, q), "float32", seed=q)
    a[2, 1, 0, -1] = r[2, 1, 0, -1] + 1e3  # a maximum in the last element of the last span
    got = metrics_kernel.rows(a, r, "float32", 1e-6, 1e-6)
    want = numpy_metrics(a, r, "float32", 1e-6, 1e-6, axes=(0, 3))
    np.testing.assert_array_equal(got[[0, 2, 3, 4]], want[[0, 2, 3, 4]])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13)


@pytest.mark.parametrize("view", ["time-major", "reversed", "sliced"])
def test_outer_axes_at_any_strides_with_a_contiguous_last_axis(view):
    """An adapter's time-major output seen batch-major (outer axes permuted, last axis
    contiguous: read in place), a reversed view (negative stride: copied) and a slice."""
    a, r = awkward((4, 6, 2, 40), "float64", seed=3)
    if view == "time-major":
        a = np.ascontiguousarray(a.transpose(1, 2, 0, 3)).transpose(2, 0, 1, 3)
    elif view == "reversed":
        a, r = a[::-1], r[::-1]
    else:
        a, r = a[:, 1:5], r[:, 1:5]
    got = metrics_kernel.rows(a, np.ascontiguousarray(r), "float64", 1e-9, 1e-9)
    want = numpy_metrics(a, r, "float64", 1e-9, 1e-9, axes=(0, 3))
    np.testing.assert_array_equal(got[[0, 2, 3, 4]], want[[0, 2, 3, 4]])


def test_non_finite_outputs_show_in_the_sums():
    """A NaN or Inf in ``a`` makes its row's sum non-finite (the maxima skip NaN)."""
    a, r = awkward((3, 2, 2, 50), "float32", seed=9)
    a[1, 0, 1, 7], a[2, 1, 0, 40] = np.nan, np.inf
    got = metrics_kernel.rows(a, r, "float32", 1e-5, 1e-5)
    assert np.isnan(got[1, 0, 1]) and np.isinf(got[1, 1, 0])
    assert np.isfinite(np.delete(got[1].ravel(), [1, 2])).all()


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_the_pre_pass_spacing_is_the_tables_or_zero(dtype):
    """The SIMD pass's ULP from the exponent bits equals the table wherever it is a normal
    float64, and is 0 (every element through to the exact pass) elsewhere, never above."""
    import numba

    table, _, emin, digits = metrics_kernel._format(dtype)

    @numba.njit
    def spacing(x):
        out = np.empty_like(x)
        for i in range(x.size):
            out[i] = metrics_kernel._ulp_bits(x[i], emin, digits)
        return out

    x = np.abs(np.ldexp(1.5, np.arange(-1074, 1024)))
    x = np.concatenate([[0.0], x[np.isfinite(x)]])
    got = spacing(x)
    want = table[x.view(np.uint64) >> np.uint64(52)]
    normal = want >= np.finfo(np.float64).tiny
    np.testing.assert_array_equal(got[normal], want[normal])
    assert (got[~normal] == 0).all() and (got <= want).all()


def test_a_memo_kept_with_the_reference_gives_the_same_rows():
    """What rows() works out once per layout of ``a`` (kept in ``memo``) serves later calls
    with other values and another layout alike; for a time-major ``a`` the memo holds ``r``
    copied in that order."""
    a, r = awkward((4, 6, 2, 40), "float32", seed=11)
    memo: dict = {}
    time_major = np.ascontiguousarray(a.transpose(1, 2, 0, 3)).transpose(2, 0, 1, 3)
    for x in (a, a * 1.5, time_major, time_major[::1] + 1.0, a[:, :, :, :]):
        got = metrics_kernel.rows(x, r, "float32", 1e-5, 1e-5, memo)
        want = metrics_kernel.rows(np.array(x), r, "float32", 1e-5, 1e-5)
        np.testing.assert_array_equal(got, want)
    assert len(memo) == 2  # batch-major and time-major
    tm = memo[(time_major.shape, time_major.strides)]
    assert tm.fr.flags.c_contiguous and not np.shares_memory(tm.fr, r)
    assert np.shares_memory(memo[(a.shape, a.strides)].fr, r)  # already in a's order
