"""The float64 reference against TensorFlow's legacy (TF1-style) cells, for the TF-only features.

``tf_keras.src.layers.rnn.legacy_cells.LSTMCell`` is the oracle for peepholes, ``cell_clip``,
``num_proj``/``proj_clip`` and the runtime ``forget_bias``; ``GRUCell`` is the oracle for the
reset-before GRU. Both are built in float64 and unrolled step by step in eager TF. Their
variables are read back and mapped to canonical blocks **by hand below** (not through
``harness.layouts``). Facts used (docs/layouts.md, tf-legacy):

- LSTMCell ``kernel [I + (P or H), 4H]``: rows x first, then m_prev; column blocks **i, j, f, o**
  (j is the candidate, canonical g); Keras orientation, so ``W_g = kernel[:I, block].T``.
- ``bias [4H]`` (one bias: canonical ``bR = 0``); ``forget_bias`` is added at run time.
- ``w_i_diag``, ``w_f_diag``, ``w_o_diag`` ``[H]`` (o sees the new, clipped c);
  ``projection/kernel [H, P]`` so ``Wp = projection.T``; state ``LSTMStateTuple(c, m)``, c first.
- GRUCell ``gates/kernel [I + H, 2H]`` columns r then u (= z), ``gates/bias [2H]``;
  ``candidate/kernel [I + H, H]`` on ``[x, r * h]``, ``candidate/bias [H]``; reset-before.

Every check asserts max abs error <= 1e-10 (both sides are float64).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from harness import reference
from harness.data import Inputs
from harness.params import Canonical
from harness.spec import Case

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
legacy_cells = pytest.importorskip("tf_keras.src.layers.rnn.legacy_cells")
pytestmark = pytest.mark.tensorflow

ATOL = 1e-10
# TF1 LSTMCell column blocks (docs/layouts.md, tf-legacy): i, j(=g), f, o.
TF1_LSTM_BLOCK = {"i": 0, "g": 1, "f": 2, "o": 3}


def _variables(cell) -> dict[str, np.ndarray]:
    """Variable name without the cell scope and ':0' -> value (float64)."""
    out = {}
    for v in cell.variables:
        name = v.name.split(":")[0].split("/", 1)[1]  # 'lstm_cell/projection/kernel:0'
        out[name] = v.numpy().astype(np.float64)
    return out


def _randomise(cell, rng: np.random.Generator, scale: float) -> None:
    """Overwrite every variable (biases are zero- or one-initialised) with distinct values."""
    for v in cell.variables:
        v.assign(rng.uniform(-scale, scale, size=v.shape) + (0.1 if "bias" in v.name else 0.0))


def _lstm_case(**kw) -> Case:
    base = dict(name="tf-legacy-lstm", cell="lstm", input_size=3, hidden_size=5, batch=3,
                seq_len=6, dtype="float64", initial_state="random", forget_bias=1.0)
    return Case(**{**base, **kw})


def lstm_cell_to_canonical(var: dict[str, np.ndarray], case: Case) -> Canonical:
    """TF1 LSTMCell variables -> canonical blocks (one forward layer), by hand."""
    I, H = case.input_size, case.hidden_size
    kernel, bias = var["kernel"], var["bias"]
    t: dict[str, np.ndarray] = {}
    for g, k in TF1_LSTM_BLOCK.items():
        cols = slice(k * H, (k + 1) * H)
        t[f"W_{g}"] = kernel[:I, cols].T  # x rows first
        t[f"R_{g}"] = kernel[I:, cols].T  # then m_prev rows (P of them with a projection)
        t[f"bW_{g}"] = bias[cols]
        t[f"bR_{g}"] = np.zeros(H)
    if case.peepholes:
        for g in ("i", "f", "o"):
            t[f"p_{g}"] = var[f"w_{g}_diag"]
    if case.proj_size:
        t["Wp"] = var["projection/kernel"].T  # [H, P] Keras orientation -> [P, H]
    return Canonical({f"layer0/forward/{k}": v for k, v in t.items()})


def run_lstm_cell(case: Case, seed: int):
    """Build LSTMCell (float64), unroll it eagerly; return canonical, inputs, y, c_n, all c."""
    rng = np.random.default_rng(seed)
    B, T, I, H, P = case.batch, case.seq_len, case.input_size, case.hidden_size, case.out_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "LSTMCell is deprecated"
        cell = legacy_cells.LSTMCell(
            H, use_peepholes=case.peepholes, cell_clip=case.cell_clip,
            num_proj=case.proj_size or None, proj_clip=case.proj_clip,
            forget_bias=case.forget_bias, dtype=tf.float64)
    x = rng.uniform(-1.5, 1.5, size=(B, T, I))
    h0 = rng.uniform(-0.5, 0.5, size=(B, P))
    c0 = rng.uniform(-1.0, 1.0, size=(B, H))
    cell.build(tf.TensorShape([B, I]))
    _randomise(cell, rng, scale=0.9)
    state = legacy_cells.LSTMStateTuple(tf.constant(c0), tf.constant(h0))  # (c, m): c first
    ys, cs = [], []
    for t in range(T):
        m, state = cell(tf.constant(x[:, t]), state)
        ys.append(m.numpy())
        cs.append(state.c.numpy())
    canonical = lstm_cell_to_canonical(_variables(cell), case)
    inputs = Inputs(x=x, h0=h0[None], c0=c0[None], seq_lengths=None)
    return canonical, inputs, np.stack(ys, axis=1), state.c.numpy(), np.stack(cs, axis=1)


def _check(case: Case, canonical: Canonical, inputs: Inputs, y: np.ndarray,
           c_n: np.ndarray) -> dict[str, float]:
    got = reference.run(case, canonical, inputs)
    errors = {"y": float(np.max(np.abs(got.y - y))),
              "h_n": float(np.max(np.abs(got.h_n[0] - y[:, -1]))),
              "c_n": float(np.max(np.abs(got.c_n[0] - c_n)))}
    assert max(errors.values()) <= ATOL, f"{case.name}: max abs errors {errors} exceed {ATOL}"
    return errors


def test_lstm_cell_plain_forget_bias() -> None:
    case = _lstm_case(name="tf-plain")
    canonical, inputs, y, c_n, _ = run_lstm_cell(case, seed=0)
    _check(case, canonical, inputs, y, c_n)


def test_lstm_cell_peepholes_clip_projection() -> None:
    """Peepholes + cell_clip + num_proj + proj_clip + forget_bias=1.0, with both clips active."""
    case = _lstm_case(name="tf-full", peepholes=True, cell_clip=0.6, proj_size=2, proj_clip=0.2)
    canonical, inputs, y, c_n, cs = run_lstm_cell(case, seed=1)
    # The clips must bite (some values at the bound) without saturating everything.
    at_cell_clip = np.abs(cs) == case.cell_clip
    at_proj_clip = np.abs(y) == case.proj_clip
    assert 0 < at_cell_clip.mean() < 0.9, f"cell_clip active on {at_cell_clip.mean():.0%} of c"
    assert 0 < at_proj_clip.mean() < 0.9, f"proj_clip active on {at_proj_clip.mean():.0%} of h"
    _check(case, canonical, inputs, y, c_n)
    # Each feature is load-bearing: dropping it from the case moves the reference off TF.
    for change in ({"cell_clip": None}, {"proj_clip": None}, {"forget_bias": 0.0}):
        other = reference.run(case.model_copy(update=change), canonical, inputs)
        assert np.max(np.abs(other.y - y)) > 1e-3, f"{change} made no difference"


def test_lstm_cell_peepholes_only() -> None:
    case = _lstm_case(name="tf-peep", peepholes=True)
    canonical, inputs, y, c_n, _ = run_lstm_cell(case, seed=2)
    _check(case, canonical, inputs, y, c_n)
    # o's peephole sees the NEW c (pitfall P10): zeroing p_o must move the result
    t = dict(canonical.tensors)
    t["layer0/forward/p_o"] = np.zeros(case.hidden_size)
    other = reference.run(case, Canonical(t), inputs)
    assert np.max(np.abs(other.y - y)) > 1e-3


def gru_cell_to_canonical(var: dict[str, np.ndarray], case: Case) -> Canonical:
    """TF1 GRUCell variables -> canonical reset-before blocks (one forward layer), by hand."""
    I, H = case.input_size, case.hidden_size
    gk, gb = var["gates/kernel"], var["gates/bias"]
    ck, cb = var["candidate/kernel"], var["candidate/bias"]
    t: dict[str, np.ndarray] = {}
    for g, k in (("r", 0), ("z", 1)):  # gate columns r then u (= z)
        cols = slice(k * H, (k + 1) * H)
        t[f"W_{g}"], t[f"R_{g}"] = gk[:I, cols].T, gk[I:, cols].T
        t[f"bW_{g}"], t[f"bR_{g}"] = gb[cols], np.zeros(H)
    t["W_n"], t["R_n"] = ck[:I].T, ck[I:].T  # candidate reads [x, r * h]
    t["bW_n"], t["bR_n"] = cb, np.zeros(H)
    return Canonical({f"layer0/forward/{k}": v for k, v in t.items()})


def test_gru_cell_reset_before() -> None:
    case = Case(name="tf-gru", cell="gru", input_size=3, hidden_size=4, batch=3, seq_len=6,
                dtype="float64", initial_state="random", reset_after=False)
    rng = np.random.default_rng(5)
    B, T, I, H = case.batch, case.seq_len, case.input_size, case.hidden_size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cell = legacy_cells.GRUCell(H, dtype=tf.float64)
    cell.build(tf.TensorShape([B, I]))
    _randomise(cell, rng, scale=0.9)
    x = rng.uniform(-1.5, 1.5, size=(B, T, I))
    h0 = rng.uniform(-0.8, 0.8, size=(B, H))
    h, ys = tf.constant(h0), []
    for t in range(T):
        out, h = cell(tf.constant(x[:, t]), h)
        ys.append(out.numpy())
    y = np.stack(ys, axis=1)
    canonical = gru_cell_to_canonical(_variables(cell), case)
    inputs = Inputs(x=x, h0=h0[None], c0=None, seq_lengths=None)
    got = reference.run(case, canonical, inputs)
    errors = {"y": float(np.max(np.abs(got.y - y))),
              "h_n": float(np.max(np.abs(got.h_n[0] - h.numpy())))}
    assert max(errors.values()) <= ATOL, f"max abs errors {errors} exceed {ATOL}"
    # and it is reset-before: the reset-after reading of the same blocks diverges (pitfall P6)
    wrong = reference.run(case.model_copy(update={"reset_after": True}), canonical, inputs)
    assert np.max(np.abs(wrong.y - y)) > 1e-3
