"""Activations and the precision the reference cells compute in.

:class:`Precision` is how the same reference code runs in float64 (the reference) or emulates
the arithmetic of a framework in the case dtype (the noise floor): every element-wise result
rounded to the dtype, every product accumulated the way frameworks' kernels do.

The reference is array-namespace generic: every function takes its namespace from its input
arrays (:func:`array_namespace`), so the same code runs on NumPy arrays (CPU), on CuPy arrays
and on torch tensors, CPU or CUDA (the ``reference-cuda`` adapter), through the operations of
the array API standard (torch through ``array_api_compat``). The few operations whose spelling
differs between NumPy and that standard (a transpose by axes, a contiguous copy, a cast) are
the helpers below. Each activation returns a new array and writes nothing. Lower precisions (the
noise floor) run on NumPy arrays (ml_dtypes) and on torch tensors (torch's casts, rounding as
NumPy and ml_dtypes do: :func:`round_tensor`).
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
"""A NumPy or CuPy array or a torch tensor (the reference uses only operations common to all)."""
Rounding = Callable[[Array], Array]
"""A function rounding an element-wise result (:meth:`Precision.round`)."""
Activation = Callable[[Array], Array]


def array_namespace(*arrays: object) -> ModuleType:
    """``numpy`` itself for NumPy arrays (the fast path: no wrapper), ``cupy`` for CuPy arrays,
    and ``array_api_compat``'s namespace for anything else (torch tensors, CPU or CUDA).

    Neither CuPy nor torch is imported for NumPy arrays: a caller holding their arrays has
    imported them already. Mixing kinds is an error (``array_api_compat`` raises TypeError).
    """
    if all(type(a) is np.ndarray for a in arrays):  # the CPU reference's every call
        return np
    kinds = {type(a).__module__.partition(".")[0] for a in arrays
             if a is not None and not isinstance(a, np.ndarray | np.generic | float | int)}
    if not kinds:
        return np
    if kinds == {"cupy"}:
        return sys.modules["cupy"]
    import array_api_compat

    return array_api_compat.array_namespace(*arrays)


def _numpy_like(a: Array) -> bool:
    """NumPy or CuPy: the NumPy spelling of the helpers below works."""
    return isinstance(a, np.ndarray) or type(a).__module__.startswith("cupy")


def permute(a: Array, axes: tuple[int, ...]) -> Array:
    """``a`` with its axes in the order ``axes`` (a view; NumPy's ``transpose(axes)``)."""
    return a.transpose(axes) if _numpy_like(a) else array_namespace(a).permute_dims(a, axes)


def contiguous_transpose(a: Array) -> Array:
    """The transpose of the 2-D ``a``, row-major in memory (BLAS streams it faster than a
    transposed view)."""
    if _numpy_like(a):
        return array_namespace(a).ascontiguousarray(a.T)
    return a.T.contiguous()  # torch: the array API has no layout control


def copy(a: Array) -> Array:
    """A copy of ``a`` that shares no memory with it."""
    return a.copy() if _numpy_like(a) else array_namespace(a).asarray(a, copy=True)


def as_float(mask: Array, like: Array) -> Array:
    """A boolean mask as 0.0 / 1.0 in ``like``'s dtype (torch would make bool × float a float32
    tensor: the default dtype, not the operand's)."""
    if _numpy_like(mask):
        return mask.astype(like.dtype)
    return array_namespace(like).astype(mask, like.dtype)


def on_device_of(like: Array, a: np.ndarray) -> Array:
    """The NumPy array ``a`` (e.g. sequence lengths) as an array of ``like``'s kind and device."""
    if isinstance(like, np.ndarray):
        return np.asarray(a)
    xp = array_namespace(like)
    if type(like).__module__.startswith("cupy"):
        return xp.asarray(a)  # CuPy: the current device
    import array_api_compat

    return xp.asarray(a, device=array_api_compat.device(like))


def arange(n: int, like: Array) -> Array:
    """0, 1, ..., n − 1 on ``like``'s kind and device (torch makes new tensors on its default
    device, the CPU, unless told)."""
    return on_device_of(like, np.arange(n))


def zeros(shape: tuple[int, ...], like: Array) -> Array:
    """Zeros of ``like``'s dtype, kind and device."""
    if _numpy_like(like):
        return array_namespace(like).zeros(shape, dtype=like.dtype)
    import array_api_compat

    return array_namespace(like).zeros(shape, dtype=like.dtype,
                                       device=array_api_compat.device(like))


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
        if self.dtype == "float64":
            return a
        return round_tensor(a, self.dtype) if _is_torch(a) else round_to(a, self.dtype)

    def matmul(self, a: Array, b: Array) -> Array:
        if self.dtype == "float64":
            return a @ b
        product = cast(self._in_float32(a) @ self._in_float32(b), "float64")
        return product if self.dtype == "float32" else self.round(product)

    def at(self, layer: int, direction: int) -> Precision:
        """The arithmetic of one layer and direction (a quantized model has scales of each:
        :class:`harness.quantization.Quantized`); the same everywhere here."""
        return self

    def stored(self, what: str, a: Array) -> Array:
        """``a`` as a kernel stores it between its operations: ``what`` is ``x`` (the layer's
        input), ``h`` (the hidden state, fed back and output) or ``c`` (the cell state). The
        floating-point kernels store what they computed (the identity); an integer kernel
        rounds it to its quantization grid."""
        return a

    def _in_float32(self, a: Array) -> Array:
        """``a`` rounded to the dtype, held in float32 (exactly: float16 and bfloat16 values
        are float32 values)."""
        return cast(a if self.dtype == "float32" else self.round(a), "float32")


def _is_torch(a: Array) -> bool:
    return type(a).__module__.startswith("torch")


def cast(a: Array, dtype: str) -> Array:
    """``a`` converted to ``dtype`` (float32, float64): NumPy's ``astype``, the array API's
    ``astype`` for torch."""
    if _numpy_like(a):
        return a.astype(dtype)
    xp = array_namespace(a)
    return xp.astype(a, getattr(xp, dtype))


def round_tensor(a: Array, dtype: str) -> Array:
    """The float64 torch tensor ``a`` rounded to ``dtype`` (round to nearest even), as float64:
    :func:`harness.dtypes.round_to` on torch, with NumPy's and ml_dtypes' results.

    float32: one cast, as NumPy. bfloat16: ml_dtypes rounds float64 to float32, then to
    bfloat16 (twice: a value just off a bfloat16 tie that float32 rounds onto it goes to even),
    and so does this. float16: NumPy rounds float64 to float16 once, but torch's cast goes
    through float32 (twice), so the float32 step rounds to odd (toward zero, the last bit set
    where inexact): then the second rounding is the correct one (24 bits >= 11 + 2).
    """
    torch = sys.modules["torch"]
    f = a.to(torch.float32)
    if dtype == "float16":
        back = f.to(torch.float64)
        toward_zero = torch.where(back.abs() > a.abs(), torch.nextafter(f, torch.zeros_like(f)),
                                  f)
        bits = toward_zero.view(torch.int32)
        f = torch.where(back != a, bits | 1, bits).view(torch.float32)
    if dtype != "float32":
        f = f.to({"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype])
    return f.to(torch.float64)


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
    # only NumPy warns (CuPy and torch return inf silently)
    with np.errstate(over="ignore") if xp is np else contextlib.nullcontext():
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
