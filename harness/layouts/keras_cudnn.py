"""tf_keras ``CuDNNLSTM`` / ``CuDNNGRU`` (v1 API, GPU only): their variables.

    kernel            [in, 4H]  gates i f c(=g) o; GRU [in, 3H], stored z r h(=n)
    recurrent_kernel  [H, 4H]   same gate blocks
    bias              [8H]      bW_i bW_f bW_c bW_o bR_i bR_f bR_c bR_o; GRU [6H] bW_z bW_r bW_h
                                bR_z bR_r bR_h

These are not Keras-orientation kernels. The layer hands cuDNN each gate's ``[in, H]`` column
slice flattened in C order (``canonical_to_params`` without ``transpose_weights``), and cuDNN
reads those bytes as the row-major ``[H, in]`` matrix. So:

- the ``kernel`` slice of gate g is ``W_g`` (``[H, in]``) **reshaped** in C order to
  ``[in, H]``, not ``W_g.T`` (seed 001: right at H = 1 or I = 1 only);
- the ``recurrent_kernel`` slice is ``R_g`` **as is**: cuDNN computes ``R_g h``, i.e.
  ``h @ R_g.T``, not ``h @ slice``.

CuDNNGRU stores z, r, h and swaps to cuDNN's r, z, h' when it builds the buffer
(``harness/cudnn.py``). cuDNN adds no forget bias: a case's ``forget_bias`` is stored in the
bW_f block, ``bias[H:2H]`` (``unit_forget_bias`` initialises the bR_f block, ``bias[5H:6H]``).
Names as in the ``keras`` layout: bare for one unidirectional layer, else
``layer{k}/{forward|backward}/NAME``.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case

ORDER = {"lstm": "ifgo", "gru": "zrn"}  # stored gate order


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    order = ORDER[case.cell]
    return [
        fused(case, layer, d, "kernel", "W", order, transform="reshape"),
        fused(case, layer, d, "recurrent_kernel", "R", order),  # copy: read by cuDNN as R_g
        grid(case, layer, d, "bias", [[f"bW_{g}" for g in order] + [f"bR_{g}" for g in order]],
             fold_forget_bias=True),
    ]


def runtime(case: Case) -> list[str]:
    notes = ["the layer flattens each gate slice in C order into cuDNN's buffer (no transpose); "
             "cuDNN reads it as the row-major [H, in] matrix, so kernel slices hold reshaped W_g "
             "and recurrent_kernel slices hold R_g itself (h @ R_g.T)"]
    if case.cell_kind.reads("reset_after"):
        notes.append("GRU: stored z, r, h; the layer swaps them to cuDNN's r, z, h'. Reset-after: "
                     "h' = tanh(W_h x + bW_h + r * (R_h h + bR_h)), h = (1 - z) h' + z h")
    return notes


KERAS_CUDNN = Layout(
    name="keras-cudnn",
    title="tf_keras CuDNNLSTM / CuDNNGRU variables (cuDNN buffer semantics)",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
    scoped_names=True,
)
