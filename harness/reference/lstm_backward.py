"""LSTM backward pass (backpropagation through time), one layer and one direction, in float64.

It reads the :class:`~harness.reference.tape.Tape` that ``lstm.lstm_direction`` records: per
step the values of the forward equations by their names there (c̃ is ``c_raw``, h̃ ``h_raw``).
The forward, per step (σ the case's recurrent activation, ``clip`` the case's gate clip):

    a_i = W_i x + R_i h + b_i + p_i ⊙ c_prev          i = σ(clip(a_i))
    a_f = W_f x + R_f h + b_f + p_f ⊙ c_prev + fb     f = σ(clip(a_f))   (1 − i: input_forget)
    a_g = W_g x + R_g h + b_g                         g = tanh(clip(a_g))
    c̃ = f ⊙ c_prev + i ⊙ g                           c = clip(c̃, ±cell_clip)
    a_o = W_o x + R_o h + b_o + p_o ⊙ c               o = σ(clip(a_o))
    m = o ⊙ tanh(c)       h̃ = Wp m                   h = clip(h̃, ±proj_clip)

with b_g = bW_g + bR_g. The backward, per step from the last to the first, given dh (the
upstream dy at this step plus what flows back from the next step) and dc (from the next step):

    dh̃ = dh ⊙ [|h̃| ≤ proj_clip]                     dWp += dh̃ᵀ m        dm = dh̃ Wp
    do = dm ⊙ tanh(c)                                 da_o = do ⊙ σ'(a_o)
    dc += dm ⊙ o ⊙ (1 − tanh²(c)) + da_o ⊙ p_o        dp_o += Σ da_o ⊙ c
    dc̃ = dc ⊙ [|c̃| ≤ cell_clip]
    di = dc̃ ⊙ g    dg = dc̃ ⊙ i    df = dc̃ ⊙ c_prev    (input_forget: di −= df, da_f = 0)
    da_i = di ⊙ σ'(a_i)    da_f = df ⊙ σ'(a_f)    da_g = dg ⊙ (1 − g²) ⊙ [|a_g| ≤ clip]
    dc_prev = dc̃ ⊙ f + da_i ⊙ p_i + da_f ⊙ p_f       dp_i += Σ da_i ⊙ c_prev   (p_f alike)
    dh_prev = [da_i da_f da_g da_o] R

where σ'(a) is the activation's derivative at clip(a) times the gate-clip indicator
[|a| ≤ clip]. After the loop, over every step at once (dA = [da_i da_f da_g da_o], [B, T, 4H]):

    dW = dAᵀ X      dR = dAᵀ H_prev      dbW = dbR = Σ dA      dx = dA W

A step past a sequence's length holds the state, so dh and dc pass it unchanged and its dA is
zero (its dy is ignored: y is a constant 0 there).

Clips: the gradient passes where −clip ≤ v ≤ clip and is zero where the clip is active
(|v| > clip), as TF ``clip_by_value`` and ``torch.clamp`` do at the edge.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from harness.cells import LSTM
from harness.reference.functions import (
    FLOAT64,
    Precision,
    Rounding,
    array_namespace,
    as_float,
    copy,
)
from harness.reference.tape import Tape
from harness.spec import Case

GATES = LSTM.gates


def _sigmoid_derivative(a: np.ndarray, s: np.ndarray, q: Rounding) -> np.ndarray:
    return q(s * q(1.0 - s))


def _hard_sigmoid_tf_keras_derivative(a: np.ndarray, s: np.ndarray, q: Rounding) -> np.ndarray:
    # clip_by_value(0.2 a + 0.5, 0, 1): TF's clip gradient passes at the edges (|a| <= 2.5)
    return 0.2 * as_float(array_namespace(a).abs(a) <= 2.5, a)


def _hard_sigmoid_keras3_derivative(a: np.ndarray, s: np.ndarray, q: Rounding) -> np.ndarray:
    # relu6(a + 3) / 6: TF's Relu6Grad (and torch's hardsigmoid) are zero at the edges
    return as_float(array_namespace(a).abs(a) < 3.0, a) / 6.0


# σ'(a) from the (gate-clipped) pre-activation a and the activation s = σ(a)
HARD_SIGMOID_EDGES = {"hard_sigmoid_tf_keras": 2.5, "hard_sigmoid_keras3": 3.0}  # |a| at 0 or 1


def gate_kinks(case: Case, a: np.ndarray, a_sigma: np.ndarray, valid: np.ndarray
               ) -> dict[str, np.ndarray]:
    """Where the gate clip or a hard sigmoid's saturation is active at valid steps, from every
    gate's pre-activations ``a`` [B, T, G*H] and the σ gates' ``a_sigma``."""
    xp = array_namespace(a)
    v = valid[..., None]
    out = {}
    if case.gate_clip is not None:
        out["gate_clip"] = (xp.abs(a) > case.gate_clip) & v
    edge = HARD_SIGMOID_EDGES.get(case.recurrent_activation)
    if edge is not None:
        clip = case.gate_clip
        ac = a_sigma if clip is None else xp.clip(a_sigma, -clip, clip)
        out["hard_sigmoid"] = (xp.abs(ac) >= edge) & v
    return out


ACTIVATION_DERIVATIVES = {
    "sigmoid": _sigmoid_derivative,
    "hard_sigmoid_tf_keras": _hard_sigmoid_tf_keras_derivative,
    "hard_sigmoid_keras3": _hard_sigmoid_keras3_derivative,
}


def passes(v: np.ndarray, clip: float | None) -> np.ndarray | float:
    """Where the gradient passes a clip to ±clip: 1.0 where −clip ≤ v ≤ clip, else 0.0."""
    if clip is None:
        return 1.0
    return array_namespace(v).abs(v) <= clip


def gate_derivative(case: Case, a: np.ndarray, s: np.ndarray, q: Rounding,
                    activation: str | None = None) -> np.ndarray:
    """d act(clip(a)) / da for the pre-activation ``a`` [.., H] and its activation ``s``.

    ``activation`` None: the case's recurrent activation; ``"tanh"``: the tanh of g (GRU n).
    """
    xp = array_namespace(a)
    clip = case.gate_clip
    ac = a if clip is None else xp.clip(a, -clip, clip)
    if activation == "tanh":
        d = q(1.0 - q(s * s))
    else:
        d = ACTIVATION_DERIVATIVES[activation or case.recurrent_activation](ac, s, q)
    return d * passes(a, clip)


def kinks(case: Case, tape: Tape) -> dict[str, np.ndarray]:
    """Where a clip or a hard sigmoid's saturation is active at valid steps, [B, T, .] bool
    arrays per kind (for tests: the kinks of the forward, where a gradient is one-sided)."""
    xp = array_namespace(tape.x)
    v = tape.valid[..., None]
    a = {k: tape.over_time(f"a_{k}") for k in GATES}
    out = gate_kinks(case, xp.concatenate([a[k] for k in GATES], axis=-1),
                     xp.concatenate([a["i"], a["f"], a["o"]], axis=-1), tape.valid)
    if case.cell_clip is not None:
        out["cell_clip"] = (xp.abs(tape.over_time("c_raw")) > case.cell_clip) & v
    if case.proj_clip is not None:
        out["proj_clip"] = (xp.abs(tape.over_time("h_raw")) > case.proj_clip) & v
    return out


def lstm_step_backward(case: Case, p: dict[str, np.ndarray], s: SimpleNamespace, dh: np.ndarray,
                       dc: np.ndarray, prec: Precision = FLOAT64
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One step's backward (the per-step equations in the module text), from the step's taped
    values ``s``, dh (this step's dy plus what flows back from the next step) and dc (from the
    next step): [da_i da_f da_g da_o] [B, 4H], dc_prev [B, H] and, with a projection, dh̃
    [B, P] (None without). dh_prev is ``da R``."""
    xp = array_namespace(dh)
    q, mm = prec.round, prec.matmul
    p_i, p_f, p_o, Wp = (p.get(k) for k in ("p_i", "p_f", "p_o", "Wp"))
    dm, dh_raw = dh, None
    if case.proj_size:
        dh_raw = dh * passes(s.h_raw, case.proj_clip)
        dm = mm(dh_raw, Wp)
    do = q(dm * s.tanh_c)
    da_o = q(do * gate_derivative(case, s.a_o, s.o, q))
    dc_new = q(dc + q(q(dm * s.o) * q(1.0 - q(s.tanh_c * s.tanh_c))))
    if case.peepholes:
        dc_new = q(dc_new + q(da_o * p_o))
    dc_raw = dc_new * passes(s.c_raw, case.cell_clip)
    di = q(dc_raw * s.g)
    dg = q(dc_raw * s.i)
    df = q(dc_raw * s.c_prev)
    dc_prev = q(dc_raw * s.f)
    if case.input_forget:  # f = 1 − i: a_f is computed but unused
        di = q(di - df)
        da_f = xp.zeros_like(df)
    else:
        da_f = q(df * gate_derivative(case, s.a_f, s.f, q))
    da_i = q(di * gate_derivative(case, s.a_i, s.i, q))
    da_g = q(dg * gate_derivative(case, s.a_g, s.g, q, "tanh"))
    if case.peepholes:
        dc_prev = q(dc_prev + q(q(da_i * p_i) + q(da_f * p_f)))
    return xp.concatenate([da_i, da_f, da_g, da_o], axis=-1), dc_prev, dh_raw


def lstm_backward(
    case: Case,
    p: dict[str, np.ndarray],
    tape: Tape,
    dy: np.ndarray,
    dh_n: np.ndarray,
    dc_n: np.ndarray,
    prec: Precision = FLOAT64,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Backpropagation through time of one LSTM direction (equations in the module text).

    dy [B, T, P or H] (ignored where not valid), dh_n [B, P or H], dc_n [B, H]: upstream
    gradients of y, h_n, c_n. Returns dx [B, T, in] (zero where not valid), dh0, dc0 and the
    gradient of every block NAME of ``p`` (W_g R_g bW_g bR_g, p_i p_f p_o, Wp). ``prec``: the
    arithmetic (``q`` rounds element-wise results, ``mm`` computes the products).
    """
    xp = array_namespace(tape.x)
    q, mm = prec.round, prec.matmul
    T = tape.x.shape[1]
    W = xp.concatenate([p[f"W_{k}"] for k in GATES])
    R = xp.concatenate([p[f"R_{k}"] for k in GATES])

    dA, dH_raw = [], []  # per step, last first: [da_i da_f da_g da_o] [B, 4H], dh̃ [B, P]
    dh, dc = dh_n, dc_n
    for t in reversed(range(T)):
        da, dc_prev, dh_raw = lstm_step_backward(case, p, tape.steps[t], q(dh + dy[:, t]), dc,
                                                 prec)
        dh_prev = mm(da, R)
        v = tape.valid[:, t, None]  # a padded step holds the state: dh, dc pass it unchanged
        dA.append(xp.where(v, da, 0.0))
        if case.proj_size:
            dH_raw.append(xp.where(v, dh_raw, 0.0))
        dh, dc = xp.where(v, dh_prev, dh), xp.where(v, dc_prev, dc)

    dA = xp.stack(dA[::-1], axis=1)  # [B, T, 4H]
    dH_raw = xp.stack(dH_raw[::-1], axis=1) if case.proj_size else None  # [B, T, P]
    return mm(dA, W), dh, dc, _parameter_gradients(case, tape, dA, dH_raw, prec)


def _parameter_gradients(case: Case, tape: Tape, dA: np.ndarray, dH_raw: np.ndarray | None,
                         prec: Precision) -> dict[str, np.ndarray]:
    """Every block's gradient over every step at once ([4H, B*T] @ [B*T, .]), from dA
    [B, T, 4H] and, with a projection, dh̃ [B, T, P]."""
    xp = array_namespace(tape.x)
    q, mm = prec.round, prec.matmul
    B, T, _ = tape.x.shape
    H = case.hidden_size
    dA2 = dA.reshape(B * T, 4 * H)
    dW = mm(dA2.T, tape.x.reshape(B * T, -1))
    dR = mm(dA2.T, tape.over_time("h_prev").reshape(B * T, -1))
    db = q(xp.sum(dA2, axis=0))
    grads: dict[str, np.ndarray] = {}
    for k, gate in enumerate(GATES):
        rows = slice(k * H, (k + 1) * H)
        grads[f"W_{gate}"] = dW[rows]
        grads[f"R_{gate}"] = dR[rows]
        grads[f"bW_{gate}"] = db[rows]
        grads[f"bR_{gate}"] = copy(db[rows])  # b = bW + bR: the same gradient
    if case.peepholes:
        c_prev, c = tape.over_time("c_prev"), tape.over_time("c")
        grads["p_i"] = q(xp.sum(q(dA[..., :H] * c_prev), axis=(0, 1)))
        grads["p_f"] = q(xp.sum(q(dA[..., H:2 * H] * c_prev), axis=(0, 1)))
        grads["p_o"] = q(xp.sum(q(dA[..., 3 * H:] * c), axis=(0, 1)))
    if case.proj_size:
        grads["Wp"] = mm(dH_raw.reshape(B * T, -1).T, tape.over_time("m").reshape(B * T, H))
    return grads
