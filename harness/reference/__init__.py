"""The float64 reference: layers, directions and variable lengths around the one-direction cells.

A reverse direction reads each sequence backwards within its own length and stores its output
in input time order; steps past a sequence's length produce zeros and leave the state alone,
so h_n / c_n are each sequence's state at its last valid step (for the reverse direction: after
reading t = 0). Layer l > 0 reads the concatenated [forward, reverse] outputs of layer l − 1.

The code is array-namespace generic: with CuPy arrays in ``canonical`` and ``inputs`` it runs on
the GPU (float64 only; see ``harness/reference/functions.py``).
"""

from __future__ import annotations

from concurrent.futures import Executor
from functools import partial

import numpy as np

from harness.data import Gradients, Inputs, Outputs
from harness.params import Canonical
from harness.reference import parallel
from harness.reference.functions import array_namespace, rounding_to
from harness.reference.gru import gru_direction
from harness.reference.lstm import lstm_direction
from harness.spec import Case

CELLS = {"lstm": lstm_direction, "gru": gru_direction}


def reversal_index(lengths: np.ndarray, T: int) -> np.ndarray:
    """idx [B, T]: position t of the reversed sequence b reads input step idx[b, t].

    Valid steps are reversed within each length; padded steps map to themselves.
    """
    xp = array_namespace(lengths)
    t = xp.arange(T)[None, :]
    L = lengths[:, None]
    return xp.where(t < L, L - 1 - t, t)


def run(case: Case, canonical: Canonical, inputs: Inputs, dtype: str = "float64") -> Outputs:
    """Run the case. ``dtype`` other than float64 rounds every elementary result (noise floor).

    Large NumPy cases run on as many threads as BLAS would use (``harness.reference.parallel``).
    """
    q = rounding_to(dtype)
    cell = CELLS[case.cell]
    xp = array_namespace(inputs.x)
    B, T, _ = inputs.x.shape
    lengths = xp.asarray(inputs.lengths)
    valid = xp.arange(T)[None, :] < lengths[:, None]
    rev = reversal_index(lengths, T)
    batch_index = xp.arange(B)[:, None]
    L, D, O = case.num_layers, case.num_directions, case.out_size
    full = bool(valid.all())  # every sequence runs all T steps: reversing is a flip, a view

    def reverse(a, rows):  # a holds batch rows `rows`: reversed within each length
        return a[:, ::-1] if full else a[batch_index[:a.shape[0]], rev[rows]]

    y_layers = [xp.empty((B, T, D * O)) for _ in range(L)]  # [forward, reverse] features
    h_n = xp.empty((L * D, B, O))
    c_n = xp.empty((L * D, B, case.hidden_size)) if case.cell == "lstm" else None

    def direction(layer: int, k: int, rows: slice, helper: Executor | None) -> None:
        """One direction of one layer over some batch rows, into y_layers, h_n and c_n."""
        d = case.directions[k]
        s = layer * D + k
        layer_in = inputs.x if layer == 0 else y_layers[layer - 1]
        x = layer_in[rows] if d == 0 else reverse(layer_in[rows], rows)
        c0 = inputs.c0[s, rows] if inputs.c0 is not None else None
        features = y_layers[layer][rows, :, k * O:(k + 1) * O]
        # the cell writes its y straight into the layer's output, through a time-reversed
        # view for a full-length reverse direction (a gather otherwise)
        into = features if d == 0 else features[:, ::-1] if full else None
        y, h, c = cell(case, canonical.block(layer, d), x, valid[rows], inputs.h0[s, rows], c0,
                       q, out=into, helper=helper)
        if into is None:
            features[...] = reverse(y, rows)
        h_n[s, rows] = h
        if c_n is not None:
            c_n[s, rows] = c

    # the directions of a layer, over shards of the batch, side by side on large NumPy cases
    plan = parallel.plan(inputs.x, B, D, case.hidden_size)
    with parallel.workers(plan) as run_pieces:
        for layer in range(L):
            run_pieces([partial(direction, layer, k, rows)
                        for k in range(D) for rows in plan.row_shards(B)])
    return Outputs(y=y_layers[-1], h_n=h_n, c_n=c_n, y_layers=y_layers)


def gradients(
    case: Case, canonical: Canonical, inputs: Inputs, dtype: str = "float64"
) -> Gradients:
    """Backpropagation through time of the loss in ``harness.data`` (upstream gradients
    ``inputs.dy``, ``dh_n``, ``dc_n``): dx, dh0, dc0 and every canonical parameter's gradient.
    ``dtype`` other than float64 rounds every elementary result (the gradients' noise floor)."""
    from harness.reference.backward import backward

    return backward(case, canonical, inputs, dtype)
