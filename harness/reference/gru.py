"""GRU, one layer and one direction, in float64, written from the equations (DESIGN.md):

    r = σ(W_r x + bW_r + R_r h + bR_r)
    z = σ(W_z x + bW_z + R_z h + bR_z)
    n = tanh(W_n x + bW_n + r ⊙ (R_n h + bR_n))      reset_after  (cuDNN, PyTorch, Keras default)
    n = tanh(W_n x + bW_n + R_n (r ⊙ h) + bR_n)      reset_before (Keras reset_after=False, ONNX 0)
    h' = (1 − z) ⊙ n + z ⊙ h

``gate_clip`` clamps the pre-activations of r, z and n. σ is the case's recurrent activation.

Speed, as in ``lstm.py``: a time step allocates nothing (buffers made before the loop, ``out=``,
in-place operators; the gates are contiguous [B, H] slices of one gate-major [3, B, H] buffer),
the input projection is computed a block of timesteps at a time, and R_r h, R_z h and R_n h
(reset_after; R_r h and R_z h otherwise) are one matrix product (the R_k.T side by side:
``transposed_side_by_side``). ``q_`` is the rounding hook applied in place (nothing in
float64).
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np

from harness.reference.functions import (
    RECURRENT_ACTIVATIONS_INTO,
    Rounding,
    array_namespace,
    exact,
    in_place,
    input_projections,
    tanh_into,
    transposed_side_by_side,
)
from harness.spec import Case

GATES = ("r", "z", "n")


def gru_direction(
    case: Case,
    p: dict[str, np.ndarray],
    x: np.ndarray,
    valid: np.ndarray,
    h0: np.ndarray,
    c0: None = None,
    q: Rounding = exact,
    out: np.ndarray | None = None,
    helper: Executor | None = None,
) -> tuple[np.ndarray, np.ndarray, None]:
    """Run one GRU direction over time-ordered input.

    x [B, T, in], valid [B, T] bool, h0 [B, H]. Returns y [B, T, H] (zero where not valid),
    h_n [B, H], and None (a GRU has no cell state). ``out``, ``helper``: as in
    ``lstm_direction``. NumPy or CuPy arrays (all of one kind).
    """
    xp = array_namespace(x)
    sigma = RECURRENT_ACTIVATIONS_INTO[case.recurrent_activation]
    q_ = in_place(q)
    clip = case.gate_clip
    B, T, _ = x.shape
    H = case.hidden_size

    def act(f, a):  # a ← f(a) of the (gate-clipped) pre-activation, rounded
        if clip is not None:
            xp.clip(a, -clip, clip, out=a)
        f(a, out=a)
        q_(a)

    # Gates r, z, n: W_k.T and R_k.T side by side, bW, bR [3, H] stacked (gate-major)
    WT = transposed_side_by_side([p[f"W_{g}"] for g in GATES])  # [in, 3H]
    bW = xp.stack([p[f"bW_{g}"] for g in GATES])
    RT = transposed_side_by_side([p[f"R_{g}"] for g in GATES])  # [H, 3H]
    # bR_k repeated for every row [3, B, H]: adding it is twice as fast as broadcasting [3, 1, H]
    bR = xp.repeat(xp.stack([p[f"bR_{g}"] for g in GATES])[:, None, :], B, axis=1)

    # Buffers: Rh = R_k h + bR_k per gate [3, B, H], then the gates in place, each gate's
    # [B, H] contiguous; the state and the next.
    Rh = xp.empty((3, B, H))
    Rh_rz, n = Rh[:2], Rh[2]
    products = xp.empty((B, 3 * H))  # R_k h side by side: one matrix product a step
    products_k = products.reshape(B, 3, H).transpose(1, 0, 2)  # gate-major [3, B, H] (a view)
    r, z = Rh[0], Rh[1]
    rh = xp.empty((B, H))  # r ⊙ h (reset_before)
    h, h_new = xp.array(h0, dtype=float), xp.empty((B, H))
    tmp = xp.empty((B, H))
    # y from empty: every step writes its column. np.zeros' lazily zeroed pages would be
    # first touched one row at a time inside the loop (measured slower); filled only when padded.
    y = xp.empty((B, T, H)) if out is None else out
    masked = not valid.all()
    if masked:
        y[...] = 0.0
    projections = input_projections(x, WT, bW, q_, helper=helper)
    for t, Wx_t in enumerate(projections):  # Wx_t = W_k x_t + bW_k [3, B, H]
        if case.reset_after:  # R_k h + bR_k of the three gates at once
            xp.matmul(h, RT, out=products)
            q_(products)
            xp.add(products_k, bR, out=Rh)
            q_(Rh)
        else:  # of r and z only: R_n multiplies r ⊙ h, known after r
            xp.matmul(h, RT[:, :2 * H], out=products[:, :2 * H])
            q_(products[:, :2 * H])
            xp.add(products_k[:2], bR[:2], out=Rh_rz)
            q_(Rh_rz)
        # r, z = σ(W x + bW + R h + bR)
        Rh_rz += Wx_t[:2]
        q_(Rh_rz)
        act(sigma, Rh_rz)
        # n = tanh(W_n x + bW_n + r ⊙ (R_n h + bR_n))   or   ... + R_n (r ⊙ h) + bR_n
        if case.reset_after:
            n *= r
            q_(n)
        else:
            xp.multiply(r, h, out=rh)
            q_(rh)
            xp.matmul(rh, RT[:, 2 * H:], out=tmp)
            q_(tmp)
            xp.add(tmp, bR[2], out=n)
            q_(n)
        n += Wx_t[2]
        q_(n)
        act(tanh_into, n)
        # h' = (1 − z) ⊙ n + z ⊙ h
        xp.subtract(1.0, z, out=tmp)
        q_(tmp)
        tmp *= n
        q_(tmp)
        xp.multiply(z, h, out=h_new)
        q_(h_new)
        h_new += tmp
        q_(h_new)
        if masked:  # past a sequence's length the state is held and y stays 0
            v = valid[:, t, None]
            xp.copyto(h, h_new, where=v)
            xp.copyto(y[:, t], h_new, where=v)
        else:
            h, h_new = h_new, h
            y[:, t] = h
    return y, h, None
