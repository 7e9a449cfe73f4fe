"""A transposed copy into a slice of a native tensor: the layouts' ``transpose`` placements
(Keras, TF1 and BlockLSTM kernels hold every ``[H, in]`` block as ``[in, H]`` columns).

NumPy copies a transposed view element by element at a stride (~1-1.5 ns an element). Where
NumPy's own OpenBLAS is the scipy-openblas build of its wheels, its ``?omatcopy`` (SIMD
transposes) does it: float32 [320, 640] 100 -> 34 µs (~49 GB/s read and written, 3x the tiled
kernel below), [1280, 960] 586 -> 337 µs. Otherwise, and for a float64 block into float32, a
compiled (Numba) copy through the source in 16 x 16 tiles keeps both sides in cache: 2-3x
faster than NumPy on blocks of 128 x 128 and up. A call costs 4-7 µs, so smaller blocks stay
with NumPy (``harness.layouts.base.TRANSPOSE_MIN_SIZE``).
"""

from __future__ import annotations

import ctypes
import functools

import numba
import numpy as np

from harness.blas import numpy_openblas

TILE = 16


def _signatures() -> list:
    """dst float64 from float64, float32 from float64 or float32; the source writable or not
    (the canonical cast is read-only)."""
    f8, f4 = numba.types.float64, numba.types.float32
    out = []
    for dst, src in ((f8, f8), (f4, f8), (f4, f4)):
        for readonly in (False, True):
            out.append(numba.types.void(numba.types.Array(dst, 1, "C"), numba.types.int64,
                                        numba.types.int64,
                                        numba.types.Array(src, 2, "C", readonly=readonly)))
    return out


@numba.njit(_signatures(), nogil=True, cache=True)
def _transpose(dst, offset, row, src):
    """dst[offset + j*row + i] = src[i, j] for every (i, j) of ``src``, tile by tile (full
    tiles with constant trip counts, which the compiler unrolls); a float32 ``dst`` gets each
    value rounded to nearest, as NumPy's cast does."""
    n, m = src.shape
    for i0 in range(0, n, TILE):
        full = i0 + TILE <= n
        for j0 in range(0, m, TILE):
            if full and j0 + TILE <= m:
                for jj in range(TILE):
                    base = offset + (j0 + jj) * row + i0
                    for ii in range(TILE):
                        dst[base + ii] = src[i0 + ii, j0 + jj]
            else:
                for j in range(j0, min(j0 + TILE, m)):
                    for i in range(i0, min(i0 + TILE, n)):
                        dst[offset + j * row + i] = src[i, j]


ROW_MAJOR, TRANS = 101, 112  # CBLAS_ORDER, CBLAS_TRANSPOSE


@functools.cache
def omatcopy() -> dict[np.dtype, ctypes._CFuncPtr]:
    """dtype -> ``cblas_?omatcopy`` of the OpenBLAS NumPy runs on
    (:func:`harness.blas.numpy_openblas`), float32 and float64; empty where there is no such
    library (another BLAS, another build): the Numba copy then."""
    lib = numpy_openblas()
    found = {}
    for dtype, name, alpha in ((np.float32, "scipy_cblas_somatcopy64_", ctypes.c_float),
                               (np.float64, "scipy_cblas_domatcopy64_", ctypes.c_double)):
        fn = getattr(lib, name, None) if lib is not None else None
        if fn is not None:
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, alpha,
                           ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
            fn.restype = None
            found[np.dtype(dtype)] = fn
    return found


def transpose_into(dst: np.ndarray, src: np.ndarray) -> bool:
    """``dst[...] = src.T`` for 2-D ``src`` and ``dst`` (float64 into float64 or float32,
    float32 into float32), where ``dst`` is a view with contiguous rows into a C-contiguous
    array; False (nothing copied) for any other ``dst``. Same dtypes: OpenBLAS's ``omatcopy``
    (alpha 1: a copy) where NumPy has it (:func:`omatcopy`), else the tiled copy; a float64
    block into float32 is rounded to nearest by the tiled copy, as NumPy's cast does."""
    base = dst.base
    size = dst.itemsize
    if (base is None or dst.dtype not in (np.float64, np.float32) or base.dtype != dst.dtype
            or not base.flags.c_contiguous or dst.ndim != 2 or src.ndim != 2
            or dst.strides[1] != size or dst.strides[0] % size or dst.strides[0] < 0
            or dst.shape != src.shape[::-1]):
        return False
    fn = omatcopy().get(dst.dtype) if src.dtype == dst.dtype else None
    if fn is not None:  # dst[j, i] = src[i, j], rows of dst strides[0] apart
        src = np.ascontiguousarray(src)
        n, m = src.shape
        fn(ROW_MAJOR, TRANS, n, m, 1.0, src.ctypes.data, m, dst.ctypes.data,
           dst.strides[0] // size)
        return True
    if src.dtype != dst.dtype:
        src = src.astype(np.float64, copy=False)
    offset = dst.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    _transpose(base.reshape(-1), offset // size, dst.strides[0] // size,
               np.ascontiguousarray(src))
    return True
