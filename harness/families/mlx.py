"""The ``mlx`` family: how the ``mlx`` adapter builds and runs a stack of MLX ``nn.LSTM`` /
``nn.GRU`` modules (:func:`run_stack`), used by harness/adapters/mlx.py and pasted into its
reproducers (:func:`source`), so that a script runs MLX by the very code the adapter ran it
with; and the script's framework part around it (:data:`FAMILY`).

MLX's recurrent modules are one layer, one direction: one module per layer and direction, its
parameters set by MLX's own names (``Wx``, ``Wh``, ``bias``; a GRU's ``b``, ``bhn``), the
reverse direction run on the flipped sequence and its outputs flipped back, a bidirectional
layer's two outputs concatenated. The initial state is passed, or omitted (``hidden=None``,
``cell=None``) so that MLX's own zero-state branch runs.

The pasted part takes MLX's modules (``mx``: ``mlx.core``) and a module factory as arguments:
this module imports NumPy only.
"""

from __future__ import annotations

from harness.families.paste import Family, below

MARKER = "# --- an MLX stack as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


SCRIPT = '''import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402

PARAMS = {k[len("param/"):]: v for k, v in HANDED.items() if k.startswith("param/")}


def framework_versions():
    return {"mlx": mx.__version__}


def device():
    return str(mx.default_device())


def run_framework():
    """The stack as the harness ran it (run_stack, above): one mlx.nn module per layer and
    direction, built with CALL's arguments and its parameters set by MLX's names, on the CPU,
    fed the inputs the adapter got; the initial state omitted (hidden=None) where CALL says."""
    mx.set_default_device(mx.cpu)

    def module(layer):
        return getattr(nn, CALL["module"])(CALL["input_sizes"][layer], CALL["hidden_size"],
                                           bias=CALL["bias"])

    ys, h_n, c_n = run_stack(
        mx, module, PARAMS, HANDED["feed/x"], HANDED["feed/h0"], HANDED.get("feed/c0"),
        dtype=getattr(mx, CALL["dtype"]), num_layers=SPEC["num_layers"],
        directions=SPEC["directions"], lstm=SPEC["has_cell_state"],
        omit_state=CALL["initial_state"] == "omitted")
    return dict(enumerate(ys)), h_n, c_n
'''

FAMILY = Family(
    "mlx", framework=lambda call: SCRIPT, needs=lambda call: "MLX (pip install 'mlx[cpu]')",
    pasted=(source,), trackers={"mlx": "https://github.com/ml-explore/mlx/issues"})


# --- an MLX stack as the harness runs it (pasted into repro.py) ---
import numpy as np  # noqa: E402

MLX_DIRECTION_NAMES = ("forward", "backward")  # the parameter prefixes' direction names


def run_stack(mx, make_module, params, x, h0, c0, *, dtype, num_layers, directions, lstm,
              omit_state):
    """Run the stack and return (y of each layer, h_n, c_n) as float64 NumPy arrays.

    ``make_module(layer)``: a fresh one-direction module for that layer; ``params``: MLX's
    parameters by name (``Wx``... for one layer and direction, else ``layer{k}/{forward|
    backward}/Wx``...); ``x`` [B, T, I], ``h0`` (``c0``) [L*D, B, H]; ``dtype``: an
    ``mlx.core`` dtype; ``omit_state``: call with ``hidden=None`` (and ``cell=None``)."""
    single = num_layers == 1 and len(directions) == 1

    def array(a):
        # float64 -> the case dtype inside MLX (NumPy has no bfloat16); mx.array makes a
        # float64 NumPy array float32 unless told its dtype
        return mx.array(np.asarray(a, dtype=np.float64), dtype=mx.float64).astype(dtype)

    layer_in = array(x)
    h_n, c_n, y_layers = [], [], []
    for layer in range(num_layers):
        outs = []
        for k, d in enumerate(directions):
            prefix = "" if single else f"layer{layer}/{MLX_DIRECTION_NAMES[d]}/"
            m = make_module(layer)
            m.update({n: array(params[prefix + n]) for n in m.parameters()})
            s = layer * len(directions) + k
            hidden = None if omit_state else array(h0[s])
            cell = None if omit_state or not lstm else array(c0[s])
            seq = layer_in[:, ::-1, :] if d == 1 else layer_in
            if lstm:
                y, c = m(seq, hidden, cell)
                c_n.append(c[:, -1, :])
            else:
                y = m(seq, hidden)
            h_n.append(y[:, -1, :])
            outs.append(y[:, ::-1, :] if d == 1 else y)
        layer_in = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=-1)
        y_layers.append(layer_in)
    mx.eval(layer_in, *h_n, *c_n)

    def f64(a):
        return np.asarray(a.astype(mx.float64) if a.dtype != mx.float64 else a
                          ).astype(np.float64)

    return ([f64(v) for v in y_layers], np.stack([f64(h) for h in h_n]),
            np.stack([f64(c) for c in c_n]) if lstm else None)
