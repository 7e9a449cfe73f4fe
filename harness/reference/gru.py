"""GRU, one layer and one direction, written from its equations.

The gates in canonical order r, z, n: W [3H, in], R [3H, H], bW, bR [3H] are the gates' blocks
stacked in that order. Over all steps at once:

    Wx = x Wᵀ + bW                                         the input projection, Wx_t [B, 3H]

then per step t, from h_prev (h0 at the first step):

    Wx_r, Wx_z, Wx_n = split(Wx_t)
    Rh_r, Rh_z, Rh_n = split(h_prev Rᵀ + bR)               one recurrent product
    a_r = Wx_r + Rh_r                   r = σ(clip(a_r))
    a_z = Wx_z + Rh_z                   z = σ(clip(a_z))
    reset_after:  u = Rh_n              a_n = Wx_n + r ⊙ u      (cuDNN, PyTorch, Keras default)
    reset_before: u = r ⊙ h_prev        a_n = Wx_n + u R_nᵀ + bR_n   (Keras reset_after=False,
                                                                  ONNX linear_before_reset=0)
    n = tanh(clip(a_n))
    h = (1 − z) ⊙ n + z ⊙ h_prev

With reset_before the recurrent product covers r and z only (R_n multiplies r ⊙ h_prev, known
after r). clip(a) clamps a gate's whole pre-activation to ±gate_clip, where set; σ is the case's
recurrent activation. Past a sequence's length (``valid`` false) the state is held and y is 0.
``prec`` is the arithmetic (:class:`~harness.reference.functions.Precision`): ``q`` rounds each
element-wise result and ``mm`` computes the products; in float64 they are the identity and
``@``, for the noise floor the case dtype's arithmetic (the same equations).
"""

from __future__ import annotations

from harness.cells import GRU
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

GATES = GRU.gates


def gru_direction(
    case: Case,
    p: dict[str, Array],
    x: Array,
    valid: Array,
    h0: Array,
    c0: None = None,
    prec: Precision = FLOAT64,
    tape: Tape | None = None,
) -> tuple[Array, Array, None]:
    """Run one GRU direction over time-ordered input (equations in the module text).

    ``p``: the direction's canonical blocks by NAME (``W_r``, ``R_r``, ``bW_r``, ``bR_r``, ...).
    x [B, T, in], valid [B, T] bool, h0 [B, H]. Returns y [B, T, H] (zero where not valid),
    h_n [B, H] (the state at each sequence's last valid step) and None (a GRU has no cell
    state). ``tape``: where each step's values are recorded for the backward.
    """
    xp = array_namespace(x)
    q, mm = prec.round, prec.matmul
    sigma = RECURRENT_ACTIVATIONS[case.recurrent_activation]
    H = case.hidden_size
    rz = slice(0, 2 * H)  # r and z in the stacked blocks
    x, h0 = prec.stored("x", x), prec.stored("h", h0)  # as a kernel keeps them (quantized)

    def clip(a: Array) -> Array:
        return a if case.gate_clip is None else xp.clip(a, -case.gate_clip, case.gate_clip)

    def split(a: Array) -> list[Array]:  # the gates' [B, H] blocks of [B, 2H or 3H]
        return [a[:, k * H:(k + 1) * H] for k in range(a.shape[-1] // H)]

    W = xp.concatenate([p[f"W_{k}"] for k in GATES])
    R = xp.concatenate([p[f"R_{k}"] for k in GATES])
    bW = xp.concatenate([p[f"bW_{k}"] for k in GATES])
    bR = xp.concatenate([p[f"bR_{k}"] for k in GATES])
    # Wᵀ and Rᵀ row-major: BLAS streams them faster than a transposed view (~20 % a step)
    WT, RT = contiguous_transpose(W), contiguous_transpose(R)
    B, T, _ = x.shape
    x_steps = permute(x, (1, 0, 2)).reshape(T * B, -1)  # time-major: a step's rows contiguous
    Wx = q(mm(x_steps, WT) + bW).reshape(T, B, 3 * H)

    h_prev = h0
    ys = []
    for t in range(T):
        Wx_r, Wx_z, Wx_n = split(Wx[t])
        if case.reset_after:
            Rh_r, Rh_z, Rh_n = split(q(mm(h_prev, RT) + bR))
        else:
            Rh_r, Rh_z = split(q(mm(h_prev, RT[:, rz]) + bR[rz]))
        a_r = q(Wx_r + Rh_r)
        a_z = q(Wx_z + Rh_z)
        r = q(sigma(clip(a_r)))
        z = q(sigma(clip(a_z)))
        if case.reset_after:
            u = Rh_n
            a_n = q(Wx_n + q(r * u))
        else:
            u = q(r * h_prev)
            a_n = q(Wx_n + q(mm(u, p["R_n"].T) + p["bR_n"]))
        n = q(xp.tanh(clip(a_n)))
        h = prec.stored("h", q(q(q(1.0 - z) * n) + q(z * h_prev)))

        if tape is not None:
            tape.record(a_r=a_r, a_z=a_z, a_n=a_n, r=r, z=z, n=n, u=u, h_prev=h_prev)
        ys.append(h)
        v = valid[:, t, None]  # past a sequence's length the state is held
        h_prev = xp.where(v, h, h_prev)
    y = xp.where(valid[..., None], xp.stack(ys, axis=1), 0.0)  # and y is 0
    return y, h_prev, None
