"""LSTM, one layer and one direction, in float64, written from the equations (DESIGN.md):

    i = σ(W_i x + R_i h + bW_i + bR_i + p_i ⊙ c_prev)
    f = σ(W_f x + R_f h + bW_f + bR_f + forget_bias + p_f ⊙ c_prev)   (f = 1 − i: input_forget)
    g = tanh(W_g x + R_g h + bW_g + bR_g)
    c = f ⊙ c_prev + i ⊙ g                    then clip to ±cell_clip
    o = σ(W_o x + R_o h + bW_o + bR_o + p_o ⊙ c)                         o's peephole sees the new c
    m = o ⊙ tanh(c);   h = Wp m  then clip to ±proj_clip   (h = m without projection)

``gate_clip`` (ONNX ``clip``) clamps every gate's whole pre-activation before its activation.
σ is the case's recurrent activation. The input projection W x + b is one matrix product per
block of timesteps; the recurrence is a loop over time, vectorised over the batch.

Speed (benchmarks/bench_reference.py): a time step allocates nothing. Each elementary result is
written into a buffer made before the loop (``out=``, in-place operators). The four recurrent
products R_k h are one matrix product with the R_k.T side by side (``transposed_side_by_side``),
read gate-major as they are added to W_k x + b_k into one gate-major buffer [4, B, H], so each
gate is a contiguous [B, H] (NumPy's loops over column slices of a [B, 4H] cost a multiple),
and σ runs once over the adjacent gates i, f, o. ``q_`` after each
operation is the rounding hook applied in place (the noise floor: the same elementary results
rounded as in the equations above); in float64 it does nothing.
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

GATES = ("i", "f", "o", "g")
"""Order of the gate blocks in W, R, b here (any order is the same LSTM): the three
σ gates adjacent, so one activation call covers them."""


def lstm_direction(
    case: Case,
    p: dict[str, np.ndarray],
    x: np.ndarray,
    valid: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    q: Rounding = exact,
    out: np.ndarray | None = None,
    helper: Executor | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run one LSTM direction over time-ordered input.

    x [B, T, in], valid [B, T] bool (steps to run; the state is held elsewhere),
    h0 [B, P or H], c0 [B, H]. Returns y [B, T, P or H] (zero where not valid), h_n, c_n.
    ``out``: where to write y (any view of that shape, e.g. this direction's features of the
    layer's output, time-reversed for a reverse direction). ``helper``: an executor on which
    the input projection is computed ahead of the recurrence (``harness.reference.parallel``).
    NumPy or CuPy arrays (all of one kind).
    """
    xp = array_namespace(x)
    sigma = RECURRENT_ACTIVATIONS_INTO[case.recurrent_activation]
    q_ = in_place(q)
    clip = case.gate_clip
    B, T, _ = x.shape
    H, O = case.hidden_size, h0.shape[-1]
    peep = case.peepholes

    def act(f, a):  # a ← f(a) of the (gate-clipped) pre-activation, rounded
        if clip is not None:
            xp.clip(a, -clip, clip, out=a)
        f(a, out=a)
        q_(a)

    # Gates i, f, o, g: W_k.T and R_k.T side by side, b [4, H] stacked (gate-major)
    WT = transposed_side_by_side([p[f"W_{g}"] for g in GATES])  # [in, 4H]
    RT = transposed_side_by_side([p[f"R_{g}"] for g in GATES])  # [P or H, 4H]
    b = xp.stack([q(p[f"bW_{g}"] + p[f"bR_{g}"]) for g in GATES])
    p_i, p_f, p_o = (p.get("p_i"), p.get("p_f"), p.get("p_o"))
    Wp = p.get("Wp")

    # Buffers: the gates (pre-activations, then activations, in place) [4, B, H], each gate's
    # [B, H] contiguous; the state and the next.
    a = xp.empty((4, B, H))
    a_i, a_f, a_o, a_g = a
    Rh = xp.empty((B, 4 * H))  # R_k h side by side: one matrix product a step
    Rh_k = Rh.reshape(B, 4, H).transpose(1, 0, 2)  # the same, gate-major [4, B, H] (a view)
    sigma_gates = a[:2] if peep else a[:3]  # o's peephole needs the new c first
    h, h_new = xp.array(h0, dtype=float), xp.empty((B, O))
    c, c_new = xp.array(c0, dtype=float), xp.empty((B, H))
    m = xp.empty((B, H)) if case.proj_size else h_new
    tmp = xp.empty((B, H))
    # y from empty: every step writes its column. np.zeros' lazily zeroed pages would be
    # first touched one row at a time inside the loop (measured slower); filled only when padded.
    y = xp.empty((B, T, O)) if out is None else out
    masked = not valid.all()
    if masked:
        y[...] = 0.0
    projections = input_projections(x, WT, b, q_, helper=helper)
    for t, Wx_t in enumerate(projections):  # Wx_t = W_k x_t + b_k [4, B, H]
        # pre-activations: a_k = W_k x + b_k + R_k h
        xp.matmul(h, RT, out=Rh)
        q_(Rh)
        xp.add(Rh_k, Wx_t, out=a)
        q_(a)
        if peep:  # i and f see c_prev
            for a_k, p_k in ((a_i, p_i), (a_f, p_f)):
                xp.multiply(p_k, c, out=tmp)
                q_(tmp)
                a_k += tmp
                q_(a_k)
        if case.forget_bias:
            a_f += case.forget_bias
            q_(a_f)
        act(sigma, sigma_gates)
        i, f, o = a_i, a_f, a_o
        if case.input_forget:
            xp.subtract(1.0, i, out=f)
            q_(f)
        act(tanh_into, a_g)
        g = a_g
        # c = f ⊙ c_prev + i ⊙ g
        xp.multiply(f, c, out=c_new)
        q_(c_new)
        xp.multiply(i, g, out=tmp)
        q_(tmp)
        c_new += tmp
        q_(c_new)
        if case.cell_clip is not None:
            xp.clip(c_new, -case.cell_clip, case.cell_clip, out=c_new)
        if peep:  # o sees the new c
            xp.multiply(p_o, c_new, out=tmp)
            q_(tmp)
            a_o += tmp
            q_(a_o)
            act(sigma, a_o)
        # m = o ⊙ tanh(c);  h = Wp m  (h = m without projection)
        xp.tanh(c_new, out=tmp)
        q_(tmp)
        xp.multiply(o, tmp, out=m)
        q_(m)
        if case.proj_size:
            xp.matmul(m, Wp.T, out=h_new)
            q_(h_new)
            if case.proj_clip is not None:
                xp.clip(h_new, -case.proj_clip, case.proj_clip, out=h_new)
        if masked:  # past a sequence's length the state is held and y stays 0
            v = valid[:, t, None]
            xp.copyto(h, h_new, where=v)
            xp.copyto(c, c_new, where=v)
            xp.copyto(y[:, t], h_new, where=v)
        else:
            h, h_new = h_new, h
            c, c_new = c_new, c
            if not case.proj_size:
                m = h_new
            y[:, t] = h
    return y, h, c
