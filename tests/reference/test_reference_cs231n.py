"""The float64 reference against the cs231n assignment 3 expected arrays (computed elsewhere).

Source: the cs231n 2016 winter assignment 3 notebook (Stanford CS231n,
``assignment3/LSTM_Captioning.ipynb``, "LSTM: step forward" and "LSTM: forward" cells). The
inputs are built with ``np.linspace`` exactly as in the notebook, and the expected arrays are
copied verbatim.

cs231n layout (docs/layouts.md, cs231n): ``a = x @ Wx + h @ Wh + b`` with ``Wx [D, 4H]``,
``Wh [H, 4H]``, ``b [4H]`` and gate blocks **i, f, o, g** along the columns. The mapping to
canonical blocks is written out here by hand on purpose (the harness has no cs231n layout, and
this test must not depend on the layout code): ``W_g = Wx[:, block_g].T``,
``R_g = Wh[:, block_g].T``, ``bW_g = b[block_g]``, ``bR_g = 0``.

Tolerance: the expected arrays are printed to 8 decimals, so the best possible agreement is a
rounding error of 5e-9. We assert **max abs error <= 1e-8**. The notebook's own ``rel_error``
is not used for the assertion: with values as small as 0.0176 an 8-decimal rounding alone
gives a relative error of ~1.4e-7, so a 1e-8 relative bound could not be met by any correct
implementation.
"""

from __future__ import annotations

import numpy as np

from harness import reference
from harness.data import Inputs
from harness.params import Canonical
from harness.spec import Case

# cs231n column blocks: i, f, o, g (docs/layouts.md, cs231n), i.e. NOT the canonical i, f, g, o.
CS231N_BLOCK = {"i": 0, "f": 1, "o": 2, "g": 3}

# Verbatim from seed 002, "LSTM: step forward" (N, D, H = 3, 4, 5).
expected_next_h = np.asarray([
    [0.24635157, 0.28610883, 0.32240467, 0.35525807, 0.38474904],
    [0.49223563, 0.55611431, 0.61507696, 0.66844003, 0.7159181],
    [0.56735664, 0.66310127, 0.74419266, 0.80889665, 0.858299]])
expected_next_c = np.asarray([
    [0.32986176, 0.39145139, 0.451556, 0.51014116, 0.56717407],
    [0.66382255, 0.76674007, 0.87195994, 0.97902709, 1.08751345],
    [0.74192008, 0.90592151, 1.07717006, 1.25120233, 1.42395676]])

# Verbatim from seed 002, "LSTM: forward" (N, D, H, T = 2, 5, 4, 3; c0 = 0).
expected_h = np.asarray([
    [[0.01764008, 0.01823233, 0.01882671, 0.0194232],
     [0.11287491, 0.12146228, 0.13018446, 0.13902939],
     [0.31358768, 0.33338627, 0.35304453, 0.37250975]],
    [[0.45767879, 0.4761092, 0.4936887, 0.51041945],
     [0.6704845, 0.69350089, 0.71486014, 0.7346449],
     [0.81733511, 0.83677871, 0.85403753, 0.86935314]]])

ATOL = 1e-8  # the expected arrays carry 8 decimals (rounding error <= 5e-9)


def rel_error(x: np.ndarray, y: np.ndarray) -> float:
    """The notebook's relative error, reported for information only."""
    return float(np.max(np.abs(x - y) / np.maximum(1e-8, np.abs(x) + np.abs(y))))


def cs231n_to_canonical(Wx: np.ndarray, Wh: np.ndarray, b: np.ndarray) -> Canonical:
    """cs231n ``Wx [D, 4H]``, ``Wh [H, 4H]``, ``b [4H]`` (blocks i, f, o, g) -> canonical."""
    H = Wh.shape[0]
    tensors = {}
    for gate, k in CS231N_BLOCK.items():
        cols = slice(k * H, (k + 1) * H)
        tensors[f"layer0/forward/W_{gate}"] = Wx[:, cols].T.copy()  # Keras orientation -> math
        tensors[f"layer0/forward/R_{gate}"] = Wh[:, cols].T.copy()
        tensors[f"layer0/forward/bW_{gate}"] = b[cols].copy()
        tensors[f"layer0/forward/bR_{gate}"] = np.zeros(H)  # cs231n has a single bias
    return Canonical(tensors)


def _case(N: int, D: int, H: int, T: int) -> Case:
    return Case(name="cs231n", cell="lstm", input_size=D, hidden_size=H, batch=N, seq_len=T,
                dtype="float64")


def test_lstm_step_forward_matches_cs231n() -> None:
    N, D, H = 3, 4, 5
    x = np.linspace(-0.4, 1.2, num=N * D).reshape(N, D)
    prev_h = np.linspace(-0.3, 0.7, num=N * H).reshape(N, H)
    prev_c = np.linspace(-0.4, 0.9, num=N * H).reshape(N, H)
    Wx = np.linspace(-2.1, 1.3, num=4 * D * H).reshape(D, 4 * H)
    Wh = np.linspace(-0.7, 2.2, num=4 * H * H).reshape(H, 4 * H)
    b = np.linspace(0.3, 0.7, num=4 * H)

    case = _case(N, D, H, T=1)
    inputs = Inputs(x=x[:, None, :], h0=prev_h[None], c0=prev_c[None], seq_lengths=None)
    out = reference.run(case, cs231n_to_canonical(Wx, Wh, b), inputs)

    next_h, next_c = out.h_n[0], out.c_n[0]
    np.testing.assert_allclose(next_h, expected_next_h, rtol=0, atol=ATOL)
    np.testing.assert_allclose(next_c, expected_next_c, rtol=0, atol=ATOL)
    np.testing.assert_array_equal(out.y[:, 0], next_h)  # one step: y is h_n
    assert rel_error(expected_next_h, next_h) < 1e-7
    assert rel_error(expected_next_c, next_c) < 1e-7


def test_lstm_forward_matches_cs231n() -> None:
    N, D, H, T = 2, 5, 4, 3
    x = np.linspace(-0.4, 0.6, num=N * T * D).reshape(N, T, D)
    h0 = np.linspace(-0.4, 0.8, num=N * H).reshape(N, H)
    Wx = np.linspace(-0.2, 0.9, num=4 * D * H).reshape(D, 4 * H)
    Wh = np.linspace(-0.3, 0.6, num=4 * H * H).reshape(H, 4 * H)
    b = np.linspace(0.2, 0.7, num=4 * H)

    case = _case(N, D, H, T)
    inputs = Inputs(x=x, h0=h0[None], c0=np.zeros((1, N, H)), seq_lengths=None)  # cs231n: c0 = 0
    out = reference.run(case, cs231n_to_canonical(Wx, Wh, b), inputs)

    np.testing.assert_allclose(out.y, expected_h, rtol=0, atol=ATOL)  # x and h are both [N, T, .]
    np.testing.assert_array_equal(out.h_n[0], out.y[:, -1])
    assert rel_error(expected_h, out.y) < 1e-6


def test_gate_order_matters() -> None:
    """Reading the cs231n blocks as canonical i, f, g, o (pitfall P3) must NOT match."""
    N, D, H = 3, 4, 5
    x = np.linspace(-0.4, 1.2, num=N * D).reshape(N, D)
    prev_h = np.linspace(-0.3, 0.7, num=N * H).reshape(N, H)
    prev_c = np.linspace(-0.4, 0.9, num=N * H).reshape(N, H)
    Wx = np.linspace(-2.1, 1.3, num=4 * D * H).reshape(D, 4 * H)
    Wh = np.linspace(-0.7, 2.2, num=4 * H * H).reshape(H, 4 * H)
    b = np.linspace(0.3, 0.7, num=4 * H)
    wrong = cs231n_to_canonical(Wx, Wh, b).tensors
    for name in ("W", "R", "bW"):  # swap g and o: the P3 trap
        g, o = f"layer0/forward/{name}_g", f"layer0/forward/{name}_o"
        wrong[g], wrong[o] = wrong[o], wrong[g]
    inputs = Inputs(x=x[:, None, :], h0=prev_h[None], c0=prev_c[None], seq_lengths=None)
    out = reference.run(_case(N, D, H, T=1), Canonical(wrong), inputs)
    assert np.max(np.abs(out.h_n[0] - expected_next_h)) > 1e-2
