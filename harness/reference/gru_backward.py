"""GRU backward pass (backpropagation through time), one layer and one direction, in float64.

It reads the :class:`~harness.reference.tape.Tape` that ``gru.gru_direction`` records: per
step the values of the forward equations by their names there. The forward, per step (σ the
case's recurrent activation, ``clip`` the gate clip):

    a_r = W_r x + bW_r + R_r h + bR_r                 r = σ(clip(a_r))
    a_z = W_z x + bW_z + R_z h + bR_z                 z = σ(clip(a_z))
    reset_after:  u = R_n h + bR_n,   a_n = W_n x + bW_n + r ⊙ u
    reset_before: u = r ⊙ h,          a_n = W_n x + bW_n + R_n u + bR_n
    n = tanh(clip(a_n))               h' = (1 − z) ⊙ n + z ⊙ h

The backward, per step from the last to the first, given dh' (the upstream dy at this step plus
what flows back from the next step):

    dn = dh' ⊙ (1 − z)      dz = dh' ⊙ (h − n)      dh = dh' ⊙ z
    da_n = dn ⊙ (1 − n²) ⊙ [|a_n| ≤ clip]           da_z = dz ⊙ σ'(a_z)
    reset_after:  dr = da_n ⊙ u     du = da_n ⊙ r   (the recurrent side of n: dR_n, dbR_n, dh)
    reset_before: du = da_n R_n     dr = du ⊙ h     dh += du ⊙ r   (recurrent side: da_n, on u)
    da_r = dr ⊙ σ'(a_r)             dh += [da_r da_z] [R_r; R_z] (+ du R_n with reset_after)

σ'(a) is the activation's derivative at clip(a) times [|a| ≤ clip]. After the loop, over every
step at once (dA = [da_r da_z da_n] [B, T, 3H]; dN the recurrent side of n: du with
reset_after, da_n with reset_before; U its input: h with reset_after, r ⊙ h before):

    dW = dAᵀ X    dbW = Σ dA    dR_r,z = dA_r,zᵀ H_prev    dR_n = dNᵀ U    dbR_r,z = Σ dA_r,z
    dbR_n = Σ dN   (reset_after: bR_n sits inside r ⊙ (...), so dbR_n ≠ dbW_n)    dx = dA W

A step past a sequence's length holds the state: dh passes it unchanged, its dA is zero.
"""

from __future__ import annotations

import numpy as np

from harness.cells import GRU
from harness.reference.functions import FLOAT64, Precision, array_namespace, copy
from harness.reference.lstm_backward import gate_derivative, gate_kinks
from harness.reference.tape import Tape
from harness.spec import Case

GATES = GRU.gates


def kinks(case: Case, tape: Tape) -> dict[str, np.ndarray]:
    """Where the gate clip or a hard sigmoid's saturation is active at valid steps, [B, T, .]
    bool arrays per kind (for tests: the kinks of the forward)."""
    xp = array_namespace(tape.x)
    a = {k: tape.over_time(f"a_{k}") for k in GATES}
    return gate_kinks(case, xp.concatenate([a[k] for k in GATES], axis=-1),
                      xp.concatenate([a["r"], a["z"]], axis=-1), tape.valid)


def gru_backward(
    case: Case,
    p: dict[str, np.ndarray],
    tape: Tape,
    dy: np.ndarray,
    dh_n: np.ndarray,
    dc_n: None = None,
    prec: Precision = FLOAT64,
) -> tuple[np.ndarray, np.ndarray, None, dict[str, np.ndarray]]:
    """Backpropagation through time of one GRU direction (equations in the module text).

    dy [B, T, H] (ignored where not valid), dh_n [B, H]. Returns dx [B, T, in] (zero where not
    valid), dh0, None, and the gradient of every block NAME of ``p`` (W_g R_g bW_g bR_g).
    ``prec``: the arithmetic (``q`` rounds element-wise results, ``mm`` computes the products).
    """
    xp = array_namespace(tape.x)
    q, mm = prec.round, prec.matmul
    B, T, _ = tape.x.shape
    H = case.hidden_size
    W = xp.concatenate([p[f"W_{k}"] for k in GATES])
    R_rz = xp.concatenate([p["R_r"], p["R_z"]])
    R_n = p["R_n"]

    dA, dN = [], []  # per step, last first: [da_r da_z da_n] [B, 3H]; the recurrent side of n
    dh = dh_n
    for t in reversed(range(T)):
        s = tape.steps[t]
        dh_t = q(dh + dy[:, t])
        dn = q(dh_t * q(1.0 - s.z))
        dz = q(dh_t * q(s.h_prev - s.n))
        dh_prev = q(dh_t * s.z)
        da_n = q(dn * gate_derivative(case, s.a_n, s.n, q, "tanh"))
        da_z = q(dz * gate_derivative(case, s.a_z, s.z, q))
        if case.reset_after:
            dr = q(da_n * s.u)
            dn_rec = q(da_n * s.r)
            dh_prev = q(dh_prev + mm(dn_rec, R_n))
        else:
            du = mm(da_n, R_n)
            dr = q(du * s.h_prev)
            dh_prev = q(dh_prev + q(du * s.r))
            dn_rec = da_n
        da_r = q(dr * gate_derivative(case, s.a_r, s.r, q))
        da_rz = xp.concatenate([da_r, da_z], axis=-1)
        dh_prev = q(dh_prev + mm(da_rz, R_rz))

        v = tape.valid[:, t, None]  # a padded step holds the state: dh passes it unchanged
        dA.append(xp.where(v, xp.concatenate([da_rz, da_n], axis=-1), 0.0))
        dN.append(xp.where(v, dn_rec, 0.0))
        dh = xp.where(v, dh_prev, dh)

    # Parameter gradients over every step at once: [., B*T] @ [B*T, .].
    dA2 = xp.stack(dA[::-1], axis=1).reshape(B * T, 3 * H)
    dN2 = xp.stack(dN[::-1], axis=1).reshape(B * T, H)
    h_prev = tape.over_time("h_prev").reshape(B * T, H)
    dW = mm(dA2.T, tape.x.reshape(B * T, -1))
    dbW = q(xp.sum(dA2, axis=0))
    dR_rz = mm(dA2[:, :2 * H].T, h_prev)
    # R_n multiplies h (reset_after) or u = r ⊙ h (reset_before)
    n_input = h_prev if case.reset_after else tape.over_time("u").reshape(B * T, H)
    grads = {
        "R_r": dR_rz[:H], "R_z": dR_rz[H:], "R_n": mm(dN2.T, n_input),
        "bR_r": copy(dbW[:H]), "bR_z": copy(dbW[H:2 * H]), "bR_n": q(xp.sum(dN2, axis=0)),
    }
    for k, gate in enumerate(GATES):
        rows = slice(k * H, (k + 1) * H)
        grads[f"W_{gate}"] = dW[rows]
        grads[f"bW_{gate}"] = dbW[rows]
    dx = mm(dA2.reshape(B, T, 3 * H), W)
    return dx, dh, None, grads
