"""Activations and the rounding hook shared by the reference cells.

``Rounding`` is how the same reference code runs in float64 (identity) or emulates a lower
precision (every elementary result rounded to the case dtype: the noise floor).

The reference is array-namespace generic: every function takes its namespace from its input
arrays (:func:`array_namespace`), so the same code runs on NumPy arrays (CPU) and on CuPy arrays
(the ``reference-cuda`` adapter). Rounding to a lower precision is NumPy-only (ml_dtypes).

Each activation comes twice: ``f(x)`` returns a new array (the backward's tape uses these) and
``f_into(x, out)`` writes into ``out`` (which may be ``x``): the forward cells use these on
preallocated buffers, so a time step allocates nothing. Both forms compute the same operations
in the same order, hence the same bits.
"""

from __future__ import annotations

import contextlib
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from types import ModuleType

import numpy as np

from harness.dtypes import round_to

Rounding = Callable[[np.ndarray], np.ndarray]
InPlace = Callable[[np.ndarray], object]
Activation = Callable[[np.ndarray], np.ndarray]


def array_namespace(*arrays: object) -> ModuleType:
    """``numpy``, or ``cupy`` when the arrays are CuPy arrays.

    CuPy is never imported here: a caller holding CuPy arrays has imported it already, so a
    missing ``sys.modules`` entry means NumPy (and costs one dict lookup on the NumPy path).
    """
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return np
    return cupy.get_array_module(*arrays)


def exact(a: np.ndarray) -> np.ndarray:
    return a


def rounding_to(dtype: str) -> Rounding:
    """Identity for float64; otherwise rounding to ``dtype`` (NumPy arrays only)."""
    if dtype == "float64":
        return exact
    return lambda a: round_to(a, dtype)


def input_projections(x: np.ndarray, WT: np.ndarray, b: np.ndarray, q_: InPlace,
                      block_rows: int | None = None, helper: Executor | None = None,
                      ) -> Iterator[np.ndarray]:
    """W_k x_t + b_k for every gate k: [G, B, H] for t = 0, 1, ..., T − 1 (x [B, T, in],
    WT [in, G H] the W_k.T side by side (:func:`transposed_side_by_side`), b [G, H] stacked
    per gate).

    Computed for a block of timesteps at a time, one matrix product per block (as efficient as
    one for all T at ``block_rows`` = B x timesteps rows, by default 1024), into buffers made
    once: time-major [steps x B, G H], a step's [G, B, H] yielded as a gate-major view of its
    B rows (each gate's [B, H] rows contiguous), and small and reused, so no [B, T, G H] array
    is ever made (at seed 000's size 80 MB per direction, and fresh memory pages to fault in).
    A yielded array is overwritten by a later block: use it before asking for the next
    step's. ``q_`` rounds in place after the product and after the bias (the noise floor).

    ``helper`` (an executor with one thread, ``harness.reference.parallel``): the blocks are
    computed there, up to :data:`AHEAD` blocks ahead of the step the caller is at, while the
    caller runs the recurrence; each block is the same computation as without a helper, on
    fewer rows (by default :data:`AHEAD_BLOCK_ROWS`).
    """
    xp = array_namespace(x)
    B, T, I = x.shape
    G, H = b.shape
    if block_rows is None:
        block_rows = 1024 if helper is None else AHEAD_BLOCK_ROWS
    C = max(1, min(T, block_rows // B))  # timesteps per block
    starts = range(0, T, C)
    buffers = [(xp.empty((C, B, I)), xp.empty((C * B, G * H)))
               for _ in range(1 if helper is None else min(AHEAD + 1, len(starts)))]
    b_all = b.reshape(G * H)

    def block(j: int) -> np.ndarray:  # W x + b of block j, into buffer j mod len(buffers)
        xc, Wx = buffers[j % len(buffers)]
        t0 = starts[j]
        n = min(C, T - t0)
        xc[:n] = x[:, t0:t0 + n].transpose(1, 0, 2)
        Wx_j = Wx[:n * B]
        xp.matmul(xc[:n].reshape(n * B, I), WT, out=Wx_j)
        q_(Wx_j)
        Wx_j += b_all
        q_(Wx_j)
        return Wx_j

    if helper is None:
        blocks: Iterator[np.ndarray] = map(block, range(len(starts)))
    else:
        blocks = _computed_ahead(block, len(starts), len(buffers) - 1, helper)
    for Wx_j in blocks:
        for k in range(Wx_j.shape[0] // B):
            yield Wx_j[k * B:(k + 1) * B].reshape(B, G, H).transpose(1, 0, 2)


AHEAD = 2
AHEAD_BLOCK_ROWS = 64
"""With a helper: blocks computed ahead of the caller (more than one smooths the helper's
hiccups), and rows per block. Small blocks measured fastest (B = 32, H = 256 and B = 8,
H = 320, 2 cores: 64 to 128 rows, 5-25% faster than 512 to 1024): the caller waits less for
the first, and reads each step's W x + b while it is still in cache."""


def _computed_ahead(block: Callable[[int], np.ndarray], n: int, ahead: int,
                    helper: Executor) -> Iterator[np.ndarray]:
    """block(0), ..., block(n − 1), each computed on ``helper`` up to ``ahead`` blocks before it
    is asked for. Block j + ahead is started only when block j is asked for: it overwrites the
    buffer of block j − 1, which the caller has finished with by then."""
    pending = deque(helper.submit(block, j) for j in range(min(ahead, n)))
    for j in range(n):
        if j + ahead < n:
            pending.append(helper.submit(block, j + ahead))
        yield pending.popleft().result()


def _unchanged(a: np.ndarray) -> None:
    return None


def in_place(q: Rounding) -> InPlace:
    """``q`` as an in-place operation, ``a[...] = q(a)``: the cells call it after every
    elementary result they write into a buffer. For :func:`exact` it does nothing at all."""
    if q is exact:
        return _unchanged

    def rounded(a: np.ndarray) -> None:
        a[...] = q(a)

    return rounded


def transposed_side_by_side(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """[in, G H]: the [H, in] ``blocks`` transposed and side by side, in C order, so that
    ``v @ it`` is every block's product with v in one matrix product (one BLAS call streaming
    the matrix once). At seed 000's sizes (B = 8, H = 320, one thread) the recurrent products
    of an LSTM direction's 1000 steps took 255 -> 209 ms against four products into a
    [4, B, H] buffer, and a GRU's input projections 224 -> 210 ms; a transposed (F-order) view
    of the stacked blocks loses most of that."""
    xp = array_namespace(blocks[0])
    return xp.ascontiguousarray(xp.concatenate(list(blocks)).T)


def sigmoid_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = 1 / (1 + exp(−x)); ``out`` may be ``x``.

    Within 1.2 ulp relative of the true value over the whole normal range, both tails
    included (measured against 80-bit long double): exp(−x) carries the small values' relative
    precision and nothing cancels. 0.5 (1 + tanh(x / 2)) costs the same passes but cancels
    for x < 0: two digits lost at x = −5, all of them below x ≈ −37. For x < −709.78, exp(−x)
    overflows to inf and σ is exactly 0 (the true value is subnormal there); NumPy's overflow
    warning for that is silenced.
    """
    xp = array_namespace(x)
    with np.errstate(over="ignore") if xp is np else contextlib.nullcontext():  # CuPy: no warning
        xp.negative(x, out=out)
        xp.exp(out, out=out)
    out += 1.0
    return xp.divide(1.0, out, out=out)  # = reciprocal (the same IEEE division), 2x as fast


def hard_sigmoid_tf_keras_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """tf_keras / Keras 2: clip(0.2 x + 0.5, 0, 1)."""
    xp = array_namespace(x)
    xp.multiply(x, 0.2, out=out)
    out += 0.5
    return xp.clip(out, 0.0, 1.0, out=out)


def hard_sigmoid_keras3_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Keras 3: relu6(x + 3) / 6 = clip(x / 6 + 0.5, 0, 1)."""
    xp = array_namespace(x)
    xp.divide(x, 6.0, out=out)
    out += 0.5
    return xp.clip(out, 0.0, 1.0, out=out)


def tanh_into(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return array_namespace(x).tanh(x, out=out)


def _new(f_into: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Activation:
    """The activation returning a new array, from the one writing into ``out``."""
    def f(x: np.ndarray) -> np.ndarray:
        return f_into(x, array_namespace(x).empty_like(x, dtype=float))

    f.__name__ = f_into.__name__.removesuffix("_into")
    f.__doc__ = f_into.__doc__
    return f


sigmoid = _new(sigmoid_into)
hard_sigmoid_tf_keras = _new(hard_sigmoid_tf_keras_into)
hard_sigmoid_keras3 = _new(hard_sigmoid_keras3_into)

RECURRENT_ACTIVATIONS_INTO = {
    "sigmoid": sigmoid_into,
    "hard_sigmoid_tf_keras": hard_sigmoid_tf_keras_into,
    "hard_sigmoid_keras3": hard_sigmoid_keras3_into,
}
RECURRENT_ACTIVATIONS = {
    "sigmoid": sigmoid,
    "hard_sigmoid_tf_keras": hard_sigmoid_tf_keras,
    "hard_sigmoid_keras3": hard_sigmoid_keras3,
}
