"""The float64 cell equations every reproducer carries: this file's text from the marker line
down is pasted into ``repro.py`` (:func:`source`), so it imports NumPy only and names nothing
of the harness. It implements the features :func:`harness.repro.record.unsupported` lets
through (LSTM with forget_bias and gate clipping; GRU with the reset gate after or before the
recurrent product; sigmoid gates; one, reverse or two directions; stacked layers; per-sequence
lengths; initial states) and refuses the rest there, so a script never computes a wrong
expectation. The harness's own reference (harness/reference/) is tested against it.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "# --- float64 equations (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    text = Path(__file__).read_text(encoding="utf-8")
    return text[text.index(MARKER, text.index(MARKER) + 1):]


# --- float64 equations (pasted into repro.py) ---
import numpy as np  # noqa: E402


def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def cell_direction(p, x, lengths, h0, c0, reverse, reset_after=True, gate_clip=None,
                   forget_bias=0.0):
    """One layer, one direction, float64: an LSTM where there is a cell state (c0 [B, H]), a
    GRU where c0 is None. p: the gate blocks by name (W_i [H, in], R_i [H, H], bW_i, bR_i [H];
    LSTM gates i f g o, GRU r z n). x [B, T, in]; lengths [B]; h0 [B, H].
    A reverse direction reads each sequence backwards from its last valid step; past a
    sequence's length y is 0 and the state is held. Returns y [B, T, H], h_n, c_n [B, H].

    LSTM: a_k = x W_k' + bW_k + h R_k' + bR_k (a_f + forget_bias), clipped to +-gate_clip;
      i, f, o = sigmoid(a), g = tanh(a_g); c = f c + i g; h = o tanh(c).
    GRU:  r, z = sigmoid(x W' + bW + h R' + bR);
      reset_after:  n = tanh(x W_n' + bW_n + r (h R_n' + bR_n))
      reset before: n = tanh(x W_n' + bW_n + (r h) R_n' + bR_n);  h = (1 - z) n + z h."""
    B, T, _ = x.shape
    h = np.array(h0, dtype=np.float64)
    c = None if c0 is None else np.array(c0, dtype=np.float64)
    y = np.zeros((B, T, h.shape[1]))
    rows = np.arange(B)

    def clip(a):
        return a if gate_clip is None else np.clip(a, -gate_clip, gate_clip)

    def pre(k, xt, hk):
        return xt @ p["W_" + k].T + p["bW_" + k] + hk @ p["R_" + k].T + p["bR_" + k]

    for s in range(T):
        valid = s < lengths
        t = np.where(valid, lengths - 1 - s, s) if reverse else np.full(B, s)
        xt = x[rows, t]
        if c is not None:  # LSTM
            i = sigmoid(clip(pre("i", xt, h)))
            f = sigmoid(clip(pre("f", xt, h) + forget_bias))
            g = np.tanh(clip(pre("g", xt, h)))
            o = sigmoid(clip(pre("o", xt, h)))
            c_new = f * c + i * g
            h_new = o * np.tanh(c_new)
            c = np.where(valid[:, None], c_new, c)
        else:
            r = sigmoid(clip(pre("r", xt, h)))
            z = sigmoid(clip(pre("z", xt, h)))
            wx_n = xt @ p["W_n"].T + p["bW_n"]
            if reset_after:
                n = np.tanh(clip(wx_n + r * (h @ p["R_n"].T + p["bR_n"])))
            else:
                n = np.tanh(clip(wx_n + (r * h) @ p["R_n"].T + p["bR_n"]))
            h_new = (1.0 - z) * n + z * h
        h = np.where(valid[:, None], h_new, h)
        y[rows[valid], t[valid]] = h_new[valid]
    return y, h, c


def stack(spec, weights, x, lengths, h0, c0):
    """Every layer and direction: layer k+1 reads layer k's [forward, backward] outputs.
    weights["layer{k}/{forward|backward}/{W_i,...}"]; h0, c0 [layers * directions, B, H].
    Returns ([y of each layer, B x T x D*H], h_n, c_n [layers * directions, B, H])."""
    names = ("forward", "backward")
    ys, hs, cs = [], [], []
    inp = np.asarray(x, dtype=np.float64)
    for k in range(spec["num_layers"]):
        outs = []
        for j, d in enumerate(spec["directions"]):
            prefix = f"layer{k}/{names[d]}/"
            p = {n[len(prefix):]: v for n, v in weights.items() if n.startswith(prefix)}
            s = k * len(spec["directions"]) + j
            y, h, c = cell_direction(
                p, inp, lengths, h0[s], None if c0 is None else c0[s],
                reverse=d == 1, reset_after=spec["reset_after"], gate_clip=spec["gate_clip"],
                forget_bias=spec["forget_bias"])
            outs.append(y)
            hs.append(h)
            cs.append(c)
        inp = np.concatenate(outs, axis=-1)
        ys.append(inp)
    return ys, np.stack(hs), (None if c0 is None else np.stack(cs))
