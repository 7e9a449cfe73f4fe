"""TFLite's hybrid kernels' run-time quantization of a float operand (``tensor_utils``'s
``SymmetricQuantizeFloats`` and ``AsymmetricQuantizeFloats``, docs/quantization.md, "LiteRT's
hybrid kernel") as the integer-aware reference applies it: each row on its own grid, ties
rounded away from zero, the affine zero point from the minimum or the maximum. The kernel
itself is checked against it in tests/run/test_run_deployed_files.py."""

from __future__ import annotations

import numpy as np

from harness.frameworks.litert_flatbuffer import HYBRID_ASYMMETRIC, HYBRID_SYMMETRIC
from harness.grids import DynamicActivation


def test_symmetric_rows_on_their_own_grids_ties_away_from_zero() -> None:
    a = np.array([[-0.5, 1.0, 0.25],    # scale 1/127: -63.5 -> -64, 31.75 -> 32
                  [0.5, -2.0, 0.0],     # scale 2/127: its own range
                  [0.0, 0.0, 0.0]])     # an all-zero row stays zeros
    q = HYBRID_SYMMETRIC.round(a)
    assert np.allclose(q[0] * 127, [-64, 127, 32], atol=1e-5)
    assert np.allclose(q[1] * 127 / 2, [32, -127, 0], atol=1e-5)
    assert np.all(q[2] == 0)
    # scale 1: a tie, 2.5, rounds half away from zero (3) where half to even gives 2
    tie = np.array([[2.5, 127.0]])
    assert HYBRID_SYMMETRIC.round(tie)[0, 0] == 3.0
    assert DynamicActivation(-127, 127, symmetric=True, rows=1).round(tie)[0, 0] == 2.0


def test_asymmetric_grid_of_a_row_with_zero_in_its_range() -> None:
    g = HYBRID_ASYMMETRIC.grid(-1.0, 0.5)
    assert g.scale == float(np.float32(1.5 / 255)) and (g.qmin, g.qmax) == (-128, 127)
    assert g.zero_point == 42  # -128 + 1 / (1.5 / 255) = 42.0
    assert HYBRID_ASYMMETRIC.grid(0.0, 2.0).zero_point == -128  # the range's minimum is 0
    assert HYBRID_ASYMMETRIC.grid(-2.0, 0.0).zero_point == 127
    row = np.array([[-1.0, 0.5, 0.0, 0.25]])
    q = HYBRID_ASYMMETRIC.round(row)
    assert np.allclose(q, row, atol=g.scale / 2) and q[0, 2] == 0.0  # 0 exactly on the grid
    assert np.all(HYBRID_ASYMMETRIC.round(np.zeros((2, 3))) == 0)
    assert "TFLite's rounding" in HYBRID_ASYMMETRIC.describe()
