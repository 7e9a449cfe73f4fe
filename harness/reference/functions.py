"""Activations and the precision the reference cells compute in.

:class:`Precision` is how the same reference code runs in float64 (the reference) or emulates
the arithmetic of a framework in the case dtype (the noise floor): every element-wise result
rounded to the dtype, every product accumulated the way frameworks' kernels do.

The reference is array-namespace generic: every function takes its namespace from its input
arrays (:func:`array_namespace`), so the same code runs on NumPy arrays (CPU) and on CuPy arrays
(the ``reference-cuda`` adapter). Each activation returns a new array and writes nothing.
Lower precisions are NumPy-only (ml_dtypes).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from harness.dtypes import round_to

Array = np.ndarray
"""A NumPy or CuPy array (the reference uses only operations common to both)."""
Rounding = Callable[[Array], Array]
"""A function rounding an element-wise result (:meth:`Precision.round`)."""
Activation = Callable[[Array], Array]


def array_namespace(*arrays: object) -> ModuleType:
    """``numpy``, or ``cupy`` when the arrays are CuPy arrays.

    CuPy is never imported here: a caller holding CuPy arrays has imported it already, so a
    missing ``sys.modules`` entry means NumPy (and costs one dict lookup on the NumPy path).
    """
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return np
    return cupy.get_array_module(*arrays)


@dataclass(frozen=True)
class Precision:
    """The arithmetic of the reference: ``round`` rounds an element-wise result, ``matmul``
    computes a product (an accumulation over its inner axis).

    - float64 (the reference): ``round`` is the identity and ``matmul`` is ``a @ b``, so the
      reference is the same code with nothing added (and runs on CuPy arrays too);
    - float32 (a noise floor): a float32 BLAS product of the float32-rounded operands, as every
      float32 framework accumulates in float32 (in its own summation order; this is one more);
    - float16, bfloat16: operands rounded to the dtype, the product accumulated in float32 and
      rounded to the dtype, as frameworks' mixed-precision kernels do.
    """

    dtype: str = "float64"

    def round(self, a: Array) -> Array:
        return a if self.dtype == "float64" else round_to(a, self.dtype)

    def matmul(self, a: Array, b: Array) -> Array:
        if self.dtype == "float64":
            return a @ b
        product = (self._in_float32(a) @ self._in_float32(b)).astype(np.float64)
        return product if self.dtype == "float32" else round_to(product, self.dtype)

    def _in_float32(self, a: Array) -> np.ndarray:
        """``a`` rounded to the dtype, held in float32 (exactly: float16 and bfloat16 values
        are float32 values)."""
        return (a if self.dtype == "float32" else round_to(a, self.dtype)).astype(np.float32)


FLOAT64 = Precision("float64")
"""The reference's precision: exact rounding and plain products."""


def sigmoid(x: Array) -> Array:
    """1 / (1 + exp(−x)).

    Within 1.2 ulp relative of the true value over the whole normal range, both tails
    included (measured against 80-bit long double): exp(−x) carries the small values' relative
    precision and nothing cancels. 0.5 (1 + tanh(x / 2)) costs the same passes but cancels
    for x < 0: two digits lost at x = −5, all of them below x ≈ −37. For x < −709.78, exp(−x)
    overflows to inf and σ is exactly 0 (the true value is subnormal there); NumPy's overflow
    warning for that is silenced.
    """
    xp = array_namespace(x)
    with np.errstate(over="ignore") if xp is np else contextlib.nullcontext():  # CuPy: no warning
        e = xp.exp(-x)
    return 1.0 / (1.0 + e)


def hard_sigmoid_tf_keras(x: Array) -> Array:
    """tf_keras / Keras 2: clip(0.2 x + 0.5, 0, 1)."""
    return array_namespace(x).clip(x * 0.2 + 0.5, 0.0, 1.0)


def hard_sigmoid_keras3(x: Array) -> Array:
    """Keras 3: relu6(x + 3) / 6 = clip(x / 6 + 0.5, 0, 1)."""
    return array_namespace(x).clip(x / 6.0 + 0.5, 0.0, 1.0)


def tanh(x: Array) -> Array:
    return array_namespace(x).tanh(x)


RECURRENT_ACTIVATIONS: dict[str, Activation] = {
    "sigmoid": sigmoid,
    "hard_sigmoid_tf_keras": hard_sigmoid_tf_keras,
    "hard_sigmoid_keras3": hard_sigmoid_keras3,
}
