"""TensorFlow's fused LSTM kernels ``BlockLSTM`` (v1) and ``BlockLSTMV2``.

Both ops take one layer and one direction; their weights, per layer and direction:

    w    [in_l + H, 4H]   x rows first, then h rows; column block g is [W_g.T ; R_g.T]
    b    [4H]             bW_g + bR_g (one summed bias)
    wci, wcf, wco [H]     peepholes p_i, p_f (they see c_prev) and p_o (it sees the new c)

The two versions differ in the order of the column blocks and in the forget bias:

- ``tf-block`` (``BlockLSTM``, also what LSTMBlockCell, LSTMBlockFusedCell and
  CudnnCompatibleLSTMCell run): blocks **i, ci(=g), f, o**; the op adds its ``forget_bias``
  attribute (default 1.0) to the f pre-activation at run time, so nothing is folded: the adapter
  passes the case's forget_bias. Its ``cell_clip`` defaults to 3.0; the adapter always passes
  the case's clip, or -1 (off).
- ``tf-block-v2`` (``BlockLSTMV2``): blocks **i, f, g, o** (Keras order); the op has no
  forget_bias attribute, so the case's forget_bias is folded into ``b``'s f block.

The peephole tensors are part of the layout only when the case has peepholes (the adapter feeds
zeros and ``use_peephole=False`` otherwise); a file of a case without them may still hold them,
as zeros (a dump of a BlockLSTM call), and is refused when they are not zero. Stacks and
bidirectional layers prefix the names with ``layer{k}/forward/`` and ``layer{k}/backward/``.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.layouts.base import Layout, NativeTensor, OptionalTensor, fused, grid
from harness.spec import Case

ORDER_V1 = "igfo"  # i, ci, f, o
ORDER_V2 = "ifgo"


def _describe(order: str, fold: bool) -> Callable[[Case, int, int], list[NativeTensor]]:
    def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
        tensors = [
            # [x, h] @ w: input rows over recurrent rows, each gate block transposed to [in, H]
            grid(case, layer, d, "w", [[f"W_{g}" for g in order], [f"R_{g}" for g in order]],
                 transform="transpose"),
            fused(case, layer, d, "b", ("bW", "bR"), order, fold_forget_bias=fold),
        ]
        if case.peepholes:
            tensors += [grid(case, layer, d, name, [[p]])
                        for name, p in (("wci", "p_i"), ("wcf", "p_f"), ("wco", "p_o"))]
        return tensors

    return describe


PEEPHOLES = ("wci", "wcf", "wco")


def _optional(case: Case) -> dict[str, OptionalTensor]:
    """``wci``, ``wcf``, ``wco`` are inputs of every BlockLSTM call, zeros when the call has no
    peepholes: a dump of such a call holds them. A case without peepholes accepts them when
    they are zero."""
    if case.peepholes or not case.cell_kind.has_cell_state:
        return {}
    with_peepholes = case.model_copy(update={"peepholes": True})
    return {t.name: OptionalTensor(t.shape, why="the case has no peepholes (set peepholes: true)")
            for t in TF_BLOCK.tensors(with_peepholes)
            if t.name.rsplit("/", 1)[-1] in PEEPHOLES}


def _runtime_v1(case: Case) -> list[str]:
    return [
        f"forget_bias={case.forget_bias:g} is passed to the op and added to f's pre-activation "
        "at run time (op default 1.0); it is stored in no tensor",
        f"cell_clip={case.cell_clip if case.cell_clip is not None else -1:g} is passed to the op "
        "(its default 3.0 would clip c silently; -1 turns clipping off)",
        "peepholes: wci, wcf see c_prev; wco sees the new (clipped) c",
        "one layer and one direction per op call; the adapter stacks layers, reverses each "
        "sequence within its length for the backward direction, and zeroes padded steps of y",
    ]


def _runtime_v2(case: Case) -> list[str]:
    notes = ["BlockLSTMV2 has no forget_bias attribute: the case's forget_bias is folded into "
             "b's f block"] if case.forget_bias else []
    return notes + [
        "peepholes: wci, wcf see c_prev; wco sees the new (clipped) c",
        "one layer and one direction per op call; the adapter stacks layers, reverses each "
        "sequence within its length for the backward direction, and zeroes padded steps of y",
    ]


TF_BLOCK = Layout(
    name="tf-block",
    title="TensorFlow BlockLSTM (v1; LSTMBlockCell, LSTMBlockFusedCell, CudnnCompatibleLSTMCell)",
    cells=("lstm",),
    describe=_describe(ORDER_V1, fold=False),
    runtime=_runtime_v1,
    scoped_names=True,
    optional=_optional,
)

TF_BLOCK_V2 = Layout(
    name="tf-block-v2",
    title="TensorFlow BlockLSTMV2",
    cells=("lstm",),
    describe=_describe(ORDER_V2, fold=True),
    runtime=_runtime_v2,
    scoped_names=True,
    optional=_optional,
)
