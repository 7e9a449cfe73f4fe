"""Weights like a trained 2-layer LSTM's (input 100, hidden 128), as PyTorch stores them.

Trained recurrent weights are mostly small with a heavy tail: here normal(0, 0.35) with 0.2 %
of the entries replaced by spikes of magnitude 2 to 7.7, and biases normal(0, 0.6) with the
forget gate's shifted by +1 and 1 % of the entries at 4.5. Seeded, so the file is reproducible:

    python cases/trained-like/make_weights.py cases/trained-like/weights.npz
"""

from __future__ import annotations

import sys

import numpy as np

I, H, L = 100, 128, 2


def make(seed: int = 2026) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for layer in range(L):
        width = I if layer == 0 else H
        for name, shape in ((f"weight_ih_l{layer}", (4 * H, width)),
                            (f"weight_hh_l{layer}", (4 * H, H))):
            w = rng.normal(0, 0.35, size=shape)
            spikes = rng.random(shape) < 0.002
            n = int(spikes.sum())
            w[spikes] = rng.choice([-1, 1], n) * rng.uniform(2, 7.7, n)
            out[name] = w.astype(np.float32)
        for name in (f"bias_ih_l{layer}", f"bias_hh_l{layer}"):
            b = rng.normal(0, 0.6, size=4 * H)
            b[H:2 * H] += 1.0  # torch's gate order i, f, g, o: the forget gate's block
            b[rng.random(4 * H) < 0.01] = 4.5
            out[name] = b.astype(np.float32)
    return out


if __name__ == "__main__":
    np.savez(sys.argv[1], **make())
