"""The ways a 2-D slice of a native tensor can be read into an [H, n] gate block (as stored,
transposed, C- or F-order reshaped), and their names in words, told at representative shapes
so that a reading is named by what it does whatever the case's sizes."""

from __future__ import annotations

import numpy as np

from harness.mistakes.mistake import flat_index

# Readings of a 2-D slice S into a [H, n] block, simplest first; (pre-transpose, order, post).
READINGS: tuple[tuple[bool, str, bool], ...] = tuple(
    (pre, order, post) for post in (False, True) for order in ("C", "F") for pre in (False, True))


def read_slice(S: np.ndarray, target: tuple[int, ...], how: tuple[bool, str, bool]) -> np.ndarray:
    pre, order, post = how
    X = S.T if pre else S
    Y = X.reshape(target[::-1] if post else target, order=order)
    return Y.T if post else Y


def representative(S_shape: tuple[int, ...], target: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes at which every reading of a slice is distinct, keeping the slice's orientation
    and squareness: names a reading by what it does, even where the case's sizes (a [H, 1]
    slice, a [1, 1] block) make it coincide with another."""
    H, n = target
    rH, rn = (5, 5) if H == n else (7, 5)
    if len(S_shape) == 1:
        return (rH * rn,), (rH, rn)
    rep = {H: rH, n: rn} if H != n else {H: rH}
    oriented = (rn, rH) if (S_shape == (n, H) and H != n) else (rH, rn)
    return (oriented if len(S_shape) == 2 else tuple(rep.get(d, d) for d in S_shape)), (rH, rn)


def reading_name(S_shape: tuple[int, ...], target: tuple[int, ...], how: tuple[bool, str, bool],
                 *, note: bool = True) -> str:
    """Words for a reading of a slice of shape ``S_shape`` into ``target`` ([H, n])."""
    idx = flat_index(S_shape)
    m = read_slice(idx, target, how)
    if idx.shape == target and np.array_equal(m, idx):
        return "as stored (not transposed)"
    if idx.T.shape == target and np.array_equal(m, idx.T):
        return "transposed"
    pre, order, post = how
    mid = "[in, H], then transposed" if post else "[H, in]"
    text = f"{'transposed, then ' if pre else ''}{order}-order reshaped to {mid}"
    if (pre, order, post) == (False, "C", False) and note:
        text += " (how cuDNN reads a flat buffer slice)"
    return text

