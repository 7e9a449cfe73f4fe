"""Floating-point formats of the case dtypes: rounding, machine epsilon, ULP.

Every canonical tensor and input is rounded to the case dtype once, then carried as float64
holding exactly representable values, so every adapter and the reference see identical bits.
bfloat16 comes from ml_dtypes (the package JAX and TensorFlow use).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Format:
    name: str
    numpy: type  # the NumPy scalar type that stores it
    mantissa_bits: int  # explicit fraction bits (float32: 23)
    min_exponent: int  # exponent of the smallest normal number (float32: -126)

    @property
    def eps(self) -> float:
        return 2.0 ** -self.mantissa_bits

    @property
    def tiny(self) -> float:
        return 2.0 ** self.min_exponent


FORMATS = {
    "float64": Format("float64", np.float64, 52, -1022),
    "float32": Format("float32", np.float32, 23, -126),
    "float16": Format("float16", np.float16, 10, -14),
    "bfloat16": Format("bfloat16", ml_dtypes.bfloat16, 7, -126),
}


def native_numpy(dtype: str) -> type:
    """The NumPy type native tensors of a ``dtype`` case are held in: the format itself, but
    float64 for bfloat16 (NumPy has no arithmetic of its own for it)."""
    return np.float64 if dtype == "bfloat16" else FORMATS[dtype].numpy


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``a`` to ``dtype`` (round to nearest even) and return it as float64. A value
    beyond the dtype's range rounds to ±inf, as the dtype's own arithmetic gives it (a float16
    pre-activation above 65504): that is the value, not a fault, so NumPy's overflow warning
    for the cast is not printed."""
    a = np.asarray(a, dtype=np.float64)
    if dtype == "float64":
        return a
    with np.errstate(over="ignore"):
        return a.astype(FORMATS[dtype].numpy).astype(np.float64)


def ulp(a: np.ndarray, dtype: str, out: np.ndarray | None = None) -> np.ndarray:
    """Spacing of ``dtype`` at each |a| (the normal spacing below the smallest normal).

    2**floor(log2 |a|) is |a| with its float64 fraction bits cleared; times 2**-mantissa_bits
    it is the spacing (exact: powers of two). ``out``: a float64 array to write into (may be
    ``a`` itself)."""
    fmt = FORMATS[dtype]
    mag = np.abs(np.asarray(a, dtype=np.float64), out=out)
    np.maximum(mag, fmt.tiny, out=mag)
    bits = mag.view(np.uint64)
    np.bitwise_and(bits, np.uint64(0x7FF0_0000_0000_0000), out=bits)
    mag *= fmt.eps
    return mag
