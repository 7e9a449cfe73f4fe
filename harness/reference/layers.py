"""The layer x direction x lengths driver shared by the forward and the backward.

A reverse direction reads each sequence backwards within its own length and stores its output
in input time order; steps past a sequence's length produce zeros and leave the state alone,
so h_n / c_n are each sequence's state at its last valid step (for the reverse direction: after
reading t = 0). Layer l > 0 reads the concatenated [forward, reverse] outputs of layer l − 1.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.reference.functions import (
    FLOAT64,
    Array,
    Precision,
    arange,
    array_namespace,
    on_device_of,
)
from harness.reference.gru import gru_direction
from harness.reference.lstm import lstm_direction
from harness.reference.tape import Tape
from harness.spec import Case

CELLS = {"lstm": lstm_direction, "gru": gru_direction}


def reversal_index(lengths: np.ndarray, T: int) -> np.ndarray:
    """idx [B, T]: position t of the reversed sequence b reads input step idx[b, t].

    Valid steps are reversed within each length; padded steps map to themselves.
    """
    xp = array_namespace(lengths)
    t = arange(T, lengths)[None, :]
    L = lengths[:, None]
    return xp.where(t < L, L - 1 - t, t)


def reading_order(inputs: Inputs) -> tuple[Array, Callable[[Array, int], Array]]:
    """(valid [B, T], order): ``order(a, d)`` is a [B, T, ...] array in the order direction d
    reads it: ``a`` itself forward, each sequence reversed within its length in reverse. The
    reversal is its own inverse, so ``order`` also takes a reverse direction's [B, T, ...]
    results back to input time order."""
    xp = array_namespace(inputs.x)
    B, T, _ = inputs.x.shape
    lengths = on_device_of(inputs.x, inputs.lengths)
    valid = arange(T, lengths)[None, :] < lengths[:, None]
    if bool(valid.all()):  # every sequence runs all T steps: reversing is a flip (a view)
        return valid, lambda a, d: a if d == 0 else xp.flip(a, axis=1)
    rows, rev = arange(B, lengths)[:, None], reversal_index(lengths, T)
    return valid, lambda a, d: a if d == 0 else a[rows, rev]


def forward(
    case: Case, canonical: Canonical, inputs: Inputs, prec: Precision = FLOAT64,
    tapes: list[Tape] | None = None,
) -> Outputs:
    """Every layer and direction of the case, layer by layer. ``tapes``: a list to which each
    direction's :class:`Tape` is appended (index layer × D + k, the order of h_n), for the
    backward. ``prec``: the arithmetic (float64: the reference; the case dtype: the noise
    floor)."""
    cell = CELLS[case.cell]
    xp = array_namespace(inputs.x)
    valid, order = reading_order(inputs)
    layer_in, y_layers, h_n, c_n = inputs.x, [], [], []
    for layer in range(case.num_layers):
        ys = []
        for k, d in enumerate(case.directions):
            s = layer * case.num_directions + k
            x = order(layer_in, d)
            c0 = inputs.c0[s] if inputs.c0 is not None else None
            tape = Tape(x, valid) if tapes is not None else None
            y, h, c = cell(case, canonical.block(layer, d), x, valid, inputs.h0[s], c0,
                           prec.at(layer, d), tape)
            ys.append(order(y, d))
            h_n.append(h)
            c_n.append(c)
            if tapes is not None:
                tapes.append(tape)
        layer_in = xp.concatenate(ys, axis=-1)
        y_layers.append(layer_in)
    return Outputs(y=layer_in, h_n=xp.stack(h_n),
                   c_n=xp.stack(c_n) if case.cell_kind.has_cell_state else None, y_layers=y_layers)
