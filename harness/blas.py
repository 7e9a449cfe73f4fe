"""NumPy's own OpenBLAS as a ctypes library: the scipy-openblas64 build NumPy's wheels bundle
(64-bit ints, ``scipy_``-prefixed symbols), for what NumPy does not expose (its ``?omatcopy``,
``harness.layouts.transpose``; its thread count, the benchmarks)."""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np


@functools.cache
def numpy_openblas() -> ctypes.CDLL | None:
    """The library, found next to NumPy (``numpy.libs`` on Linux, ``.dylibs`` on macOS; the one
    NumPy loaded, the same file), or None where NumPy runs on another BLAS or build."""
    here = os.path.dirname(np.__file__)
    for path in sorted(glob.glob(os.path.join(here, "..", "numpy.libs", "libscipy_openblas*"))
                       + glob.glob(os.path.join(here, ".dylibs", "libscipy_openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "scipy_openblas_get_num_threads64_"):  # the 64-bit-int build
            return lib
    return None
