"""How a converted model's outputs become the harness's outputs (``y`` of each layer, ``h_n``,
``c_n``): pure NumPy, used by the adapters that run a converted model (the LiteRT ones,
ExecuTorch) and pasted into their reproducers (:func:`source`), so that a script reads the
model's outputs by the very code the adapter read them with.

A model's outputs are named (a LiteRT signature's output names, an interpreter's tensor names,
an ExecuTorch method's output positions as strings); ``roles`` says what each one is:

- ``y_{k}``: layer k's ``y`` [B, T, D*H]; ``y``: the last layer's;
- ``h_n_{s}`` / ``c_n_{s}``: state s's final [B, H] (s = layer x directions + direction);
- ``h_n`` / ``c_n``: every state's, stacked [layers x directions, B, H].

A deployed model that outputs ``y`` only has no final states; where ``y`` determines ``h_n``
(one layer, no lengths) :func:`h_n_from_y` reads it from there.
"""

from __future__ import annotations

from harness.families.paste import below

MARKER = "# --- readout of a converted model's outputs (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


# --- readout of a converted model's outputs (pasted into repro.py) ---
import numpy as np  # noqa: E402


def readout(got, roles, num_layers):
    """({layer: y}, h_n, c_n) as float64 from the model's outputs ``got`` (name -> array) by
    their ``roles`` (name -> role, as above); a final state no output holds is None."""
    ys, parts, stacked = {}, {"h_n": {}, "c_n": {}}, {}
    for name, role in roles.items():
        a = np.asarray(got[name], dtype=np.float64)
        if role == "y":
            ys[num_layers - 1] = a
        elif role.startswith("y_"):
            ys[int(role[2:])] = a
        elif role in parts:
            stacked[role] = a
        else:
            kind, s = role.rsplit("_", 1)
            parts[kind][int(s)] = a

    def state(kind):
        if kind in stacked:
            return stacked[kind]
        found = parts[kind]
        return np.stack([found[s] for s in sorted(found)]) if found else None

    return ys, state("h_n"), state("c_n")


def h_n_from_y(y, directions, width):
    """The final h of each direction of a one-layer stack without lengths, read from its ``y``
    [B, T, D*width]: the forward direction's (0) at the last step, the reverse direction's (1)
    at the first, as ``y`` holds a reverse direction in input time order."""
    last = {0: y[:, -1], 1: y[:, 0]}  # direction -> the step it ends at
    return np.stack([last[d][:, k * width:(k + 1) * width] for k, d in enumerate(directions)])
