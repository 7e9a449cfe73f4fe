"""Keras ``LSTM`` / ``GRU`` (tf_keras 2.x and Keras 3 alike): cell variable names.

    kernel            [in_k, 4H]   LSTM gates i f c(=g) o; GRU [in_k, 3H], gates z r h(=n)
    recurrent_kernel  [H, 4H]      Keras orientation: x @ kernel + h @ recurrent_kernel, so the
                                   column block of gate g is W_g.T (R_g.T), not a reshape
    bias              LSTM [4H]    one bias: bW + bR summed (Keras adds nothing at run time)
                      GRU reset_after=True  [2, 3H]: row 0 input bias bW, row 1 recurrent bR
                      GRU reset_after=False [3H]: bW + bR summed (bR_n folds: it sits outside r)

A single unidirectional layer uses the bare names; stacks and ``Bidirectional`` prefix them with
``layer{k}/forward/`` and ``layer{k}/backward/``. Keras has no runtime forget bias
(``unit_forget_bias`` only initialises ``bias[H:2H]``), so a case's ``forget_bias`` is stored in
the f block of ``bias``.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case

ORDER = {"lstm": "ifgo", "gru": "zrn"}
# A cell's variables in the order Keras creates them: what get_weights / set_weights list and
# how a .keras file numbers them (vars/0, vars/1, vars/2)
CELL_VARIABLES = ("kernel", "recurrent_kernel", "bias")


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    order = ORDER[case.cell]
    tensors = [
        fused(case, layer, d, "kernel", "W", order, transform="transpose"),
        fused(case, layer, d, "recurrent_kernel", "R", order, transform="transpose"),
    ]
    if case.cell_kind.separate_biases(case.reset_after):
        # reset-after keeps bR_n inside r * (h @ R_n + bR_n), so the two biases stay apart
        rows = [[f"bW_{g}" for g in order], [f"bR_{g}" for g in order]]
        tensors.append(grid(case, layer, d, "bias", rows))
    else:
        tensors.append(fused(case, layer, d, "bias", ("bW", "bR"), order, fold_forget_bias=True))
    return tensors


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell_kind.reads("reset_after"):
        notes.append(
            "GRU: h' = z * h + (1 - z) * hh; "
            + ("hh = tanh(x @ K_h + b[0]_h + r * (h @ R_h + b[1]_h)) (reset_after=True)"
               if case.reset_after else
               "hh = tanh(x @ K_h + (r * h) @ R_h + b_h) (reset_after=False)"))
    if case.recurrent_activation != "sigmoid":
        notes.append("recurrent_activation='hard_sigmoid': tf_keras 0.2x + 0.5, "
                     "Keras 3 x/6 + 0.5 (clipped to [0, 1])")
    if case.seq_lengths is not None and case.num_directions == 1:
        notes.append("padded steps: a unidirectional Keras CPU layer repeats the last valid "
                     "output there (zero_output_for_mask=False); the adapters write 0 instead, "
                     "so only valid steps are compared. States: last valid step")
    elif case.seq_lengths is not None:
        notes.append("padded steps: Bidirectional forces zero_output_for_mask=True, so Keras "
                     "writes 0 there itself. States: last valid step")
    if case.dir_mode == "reverse":
        notes.append("reverse direction: go_backwards=True, whose output (in reading order) "
                     "the adapters flip back into input time order")
    return notes


KERAS = Layout(
    name="keras",
    title="Keras LSTM / GRU cell variables (tf_keras and Keras 3)",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
    scoped_names=True,
)
