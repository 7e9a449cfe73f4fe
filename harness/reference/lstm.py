"""LSTM, one layer and one direction, written from its equations.

The gates in canonical order i, f, g, o: W [4H, in], R [4H, P or H] and b = bW + bR [4H] are
the gates' blocks W_k, R_k, bW_k + bR_k stacked in that order. Over all steps at once:

    Wx = x Wᵀ + b                                          the input projection, Wx_t [B, 4H]

then per step t, from h_prev, c_prev (h0, c0 at the first step):

    a_i, a_f, a_g, a_o = split(Wx_t + h_prev Rᵀ)           one recurrent product
    a_i = a_i + p_i ⊙ c_prev                               (peepholes)
    a_f = a_f + p_f ⊙ c_prev + forget_bias
    i = σ(clip(a_i))
    f = σ(clip(a_f))                                       (f = 1 − i: input_forget)
    g = tanh(clip(a_g))
    c_raw = f ⊙ c_prev + i ⊙ g          c = c_raw clipped to ±cell_clip
    a_o = a_o + p_o ⊙ c                                    (peephole: o sees the new c)
    o = σ(clip(a_o))
    tanh_c = tanh(c)
    m = o ⊙ tanh_c
    h_raw = m Wpᵀ                       h = h_raw clipped to ±proj_clip   (h = m: no Wp)

clip(a) clamps a gate's whole pre-activation to ±gate_clip (ONNX ``clip``), where set; σ is
the case's recurrent activation. Past a sequence's length (``valid`` false) the state is held
and y is 0. ``prec`` is the arithmetic (:class:`~harness.reference.functions.Precision`): ``q``
rounds each element-wise result and ``mm`` computes the three products (input projection,
recurrent product, projection); in float64 they are the identity and ``@``, for the noise floor
the case dtype's arithmetic (the same equations). ``prec.stored`` is what a kernel keeps of x, h
and c between its operations (an integer kernel: their quantization; else the identity).
"""

from __future__ import annotations

from harness.cells import LSTM
from harness.reference.functions import (
    FLOAT64,
    RECURRENT_ACTIVATIONS,
    Array,
    Precision,
    array_namespace,
    contiguous_transpose,
    permute,
)
from harness.reference.tape import Tape
from harness.spec import Case

GATES = LSTM.gates


def lstm_direction(
    case: Case,
    p: dict[str, Array],
    x: Array,
    valid: Array,
    h0: Array,
    c0: Array,
    prec: Precision = FLOAT64,
    tape: Tape | None = None,
) -> tuple[Array, Array, Array]:
    """Run one LSTM direction over time-ordered input (equations in the module text).

    ``p``: the direction's canonical blocks by NAME (``W_i``, ``R_i``, ``bW_i``, ``bR_i``, ...,
    ``p_i``, ``Wp``). x [B, T, in], valid [B, T] bool, h0 [B, P or H], c0 [B, H]. Returns
    y [B, T, P or H] (zero where not valid), h_n, c_n: the state at each sequence's last valid
    step. ``tape``: where each step's values are recorded for the backward.
    """
    xp = array_namespace(x)
    q, mm = prec.round, prec.matmul
    sigma = RECURRENT_ACTIVATIONS[case.recurrent_activation]
    H = case.hidden_size
    x, h0, c0 = prec.stored("x", x), prec.stored("h", h0), prec.stored("c", c0)

    def clip(a: Array, bound: float | None) -> Array:
        return a if bound is None else xp.clip(a, -bound, bound)

    def split(a: Array) -> list[Array]:  # the gates' [B, H] blocks of [B, 4H]
        return [a[:, k * H:(k + 1) * H] for k in range(4)]

    W = xp.concatenate([p[f"W_{k}"] for k in GATES])
    R = xp.concatenate([p[f"R_{k}"] for k in GATES])
    b = xp.concatenate([q(p[f"bW_{k}"] + p[f"bR_{k}"]) for k in GATES])
    # Wᵀ and Rᵀ row-major: BLAS streams them faster than a transposed view (~20 % a step)
    WT, RT = contiguous_transpose(W), contiguous_transpose(R)
    B, T, _ = x.shape
    x_steps = permute(x, (1, 0, 2)).reshape(T * B, -1)  # time-major: a step's rows contiguous
    Wx = q(mm(x_steps, WT) + b).reshape(T, B, 4 * H)

    h_prev, c_prev = h0, c0
    ys = []
    for t in range(T):
        a_i, a_f, a_g, a_o = split(q(Wx[t] + mm(h_prev, RT)))
        if case.peepholes:
            a_i = q(a_i + q(p["p_i"] * c_prev))
            a_f = q(a_f + q(p["p_f"] * c_prev))
        if case.forget_bias:
            a_f = q(a_f + case.forget_bias)
        i = q(sigma(clip(a_i, case.gate_clip)))
        f = q(1.0 - i) if case.input_forget else q(sigma(clip(a_f, case.gate_clip)))
        g = q(xp.tanh(clip(a_g, case.gate_clip)))
        c_raw = q(q(f * c_prev) + q(i * g))
        c = prec.stored("c", clip(c_raw, case.cell_clip))
        if case.peepholes:
            a_o = q(a_o + q(p["p_o"] * c))
        o = q(sigma(clip(a_o, case.gate_clip)))
        tanh_c = q(xp.tanh(c))
        m = q(o * tanh_c)
        h_raw = mm(m, p["Wp"].T) if case.proj_size else m
        h = prec.stored("h", clip(h_raw, case.proj_clip))

        if tape is not None:
            tape.record(a_i=a_i, a_f=a_f, a_g=a_g, a_o=a_o, i=i, f=f, g=g, o=o, c_raw=c_raw,
                        c=c, tanh_c=tanh_c, m=m, h_raw=h_raw, h_prev=h_prev, c_prev=c_prev)
        ys.append(h)
        v = valid[:, t, None]  # past a sequence's length the state is held
        h_prev, c_prev = xp.where(v, h, h_prev), xp.where(v, c, c_prev)
    y = xp.where(valid[..., None], xp.stack(ys, axis=1), 0.0)  # and y is 0
    return y, h_prev, c_prev
