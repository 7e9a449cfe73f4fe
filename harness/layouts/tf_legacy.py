"""TF1-style cells ``LSTMCell`` and ``GRUCell`` (``tf_keras.src.layers.rnn.legacy_cells``,
formerly ``tf.nn.rnn_cell``): their variable names.

LSTMCell, per layer and direction (``[x, h_prev] @ kernel``, x rows first):

    kernel             [in_l + (P or H), 4H]  blocks i, j(=g), f, o; block g is [W_g.T ; R_g.T]
    bias               [4H]                    bW_g + bR_g, same order
    w_i_diag, w_f_diag, w_o_diag  [H]         peepholes (i, f see c_prev; o sees the new c)
    projection/kernel  [H, P]                  Wp.T (h = m @ projection/kernel, then proj_clip)

The cell adds its ``forget_bias`` to f's pre-activation at run time and stores it nowhere; the
adapter passes the case's value. The state is ``LSTMStateTuple(c, h)``: c first.

GRUCell (reset before: ``c = tanh([x, r ⊙ h] @ candidate/kernel + candidate/bias)``,
``h' = u ⊙ h + (1 − u) ⊙ c``, u is the update gate z):

    gates/kernel       [in_l + H, 2H]   column blocks r, u(=z); block g is [W_g.T ; R_g.T]
    gates/bias         [2H]             bW_r + bR_r, bW_z + bR_z (GRUCell initialises it to 1.0)
    candidate/kernel   [in_l + H, H]    [W_n.T ; R_n.T]
    candidate/bias     [H]              bW_n + bR_n (summing is exact only for reset-before)

Stacks and bidirectional layers prefix the names with ``layer{k}/forward/`` and
``layer{k}/backward/``.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case

LSTM_ORDER = "igfo"  # i, j, f, o
GRU_ORDER = "rz"  # r, u


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    if case.cell_kind.reads("reset_after"):
        return [
            grid(case, layer, d, "gates/kernel",
                 [[f"W_{g}" for g in GRU_ORDER], [f"R_{g}" for g in GRU_ORDER]],
                 transform="transpose"),
            fused(case, layer, d, "gates/bias", ("bW", "bR"), GRU_ORDER),
            grid(case, layer, d, "candidate/kernel", [["W_n"], ["R_n"]], transform="transpose"),
            grid(case, layer, d, "candidate/bias", [[("bW_n", "bR_n")]]),
        ]
    tensors = [
        grid(case, layer, d, "kernel",
             [[f"W_{g}" for g in LSTM_ORDER], [f"R_{g}" for g in LSTM_ORDER]],
             transform="transpose"),
        fused(case, layer, d, "bias", ("bW", "bR"), LSTM_ORDER),
    ]
    if case.peepholes:
        tensors += [grid(case, layer, d, f"w_{g}_diag", [[f"p_{g}"]]) for g in "ifo"]
    if case.proj_size:
        tensors.append(grid(case, layer, d, "projection/kernel", [["Wp"]], transform="transpose"))
    return tensors


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell_kind.has_cell_state:
        notes.append(f"LSTMCell(forget_bias={case.forget_bias:g}): added to f's pre-activation at "
                     "run time (the class default is 1.0); stored in no tensor")
        notes.append("state is LSTMStateTuple(c, h): c first")
        if case.cell_clip is not None or case.proj_clip is not None:
            notes.append("cell_clip clips c before tanh(c) and the o peephole; proj_clip clips "
                         "the projected h")
    else:
        notes.append("GRUCell is reset-before: c = tanh([x, r*h] @ candidate/kernel + "
                     "candidate/bias); h' = u*h + (1-u)*c")
    notes.append("unrolled step by step; at padded steps the adapter keeps the state and zeroes "
                 "y; the backward direction reads each sequence reversed within its length")
    return notes


TF_LEGACY = Layout(
    name="tf-legacy",
    title="TF1 LSTMCell / GRUCell (tf_keras legacy_cells, formerly tf.nn.rnn_cell)",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
    scoped_names=True,
)
