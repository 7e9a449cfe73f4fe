"""ONNX ``LSTM`` / ``GRU`` operator weight inputs.

    W  [D, 4H, in_k]   gates i o f c (GRU z r h) stacked along rows, math orientation
    R  [D, 4H, H]      (GRU [D, 3H, H])
    B  [D, 8H]         [Wb_i Wb_o Wb_f Wb_c | Rb_i Rb_o Rb_f Rb_c]  (GRU [D, 6H], z r h)
    P  [D, 3H]         peepholes i o f (i, f see c_{t-1}; o sees c_t)

Directions are the leading axis of one tensor: forward is index 0 and reverse index 1 of a
bidirectional node; a ``direction="reverse"`` node has D = 1 and its reverse weights at index 0.
``B`` and ``P`` are optional, zeros when absent (:func:`optional`). One node runs one layer, so
a single layer uses the bare names ``W R B P`` and a stack prefixes them with ``layer{k}/`` (the
native weight files). ONNX has no runtime forget bias: a case's ``forget_bias`` is stored in
``B``'s input-bias f block.
"""

from __future__ import annotations

from typing import NamedTuple

from harness.layouts.base import Layout, NativeTensor, OptionalTensor, fused, grid
from harness.spec import Case

# Canonical gate names in ONNX's block order: LSTM i o f c (canonical g is ONNX's c), GRU z r h.
ORDER = {"lstm": "iofg", "gru": "zrn"}
PEEPHOLE_ORDER = "iof"


class DataAxes(NamedTuple):
    """The axis order of an ONNX LSTM / GRU node's data for one value of its ``layout``
    attribute, in letters: T time, N batch, I input features, D direction, H hidden. ``state``
    is ``initial_h``, ``initial_c``, ``Y_h`` and ``Y_c`` alike."""

    x: str
    y: str
    state: str


# The operator's ``layout`` attribute (opset 14+; ONNX LSTM and GRU specifications): 0
# time-major, 1 batch-major. The weights W, R, B, P are the same at either.
DATA_AXES = {0: DataAxes(x="TNI", y="TDNH", state="DNH"),
             1: DataAxes(x="NTI", y="NTDH", state="NDH")}


def tensor_name(case: Case, layer: int, name: str) -> str:
    """``W`` for a single layer, ``layer{k}/W`` in a stack (one ONNX node per layer)."""
    return name if case.num_layers == 1 else f"layer{layer}/{name}"


def direction_index(case: Case, d: int) -> int:
    """Index along ONNX's direction axis of canonical direction ``d`` (0 forward, 1 reverse)."""
    return case.directions.index(d)


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    order = ORDER[case.cell]
    lead = dict(lead=(direction_index(case, d),), lead_shape=(case.num_directions,))

    def name(n: str) -> str:
        return tensor_name(case, layer, n)

    tensors = [
        fused(case, layer, d, name("W"), "W", order, axis=0, **lead),
        fused(case, layer, d, name("R"), "R", order, axis=0, **lead),
        # B = [Wb | Rb]: the 4H (3H) input biases, then the recurrent ones.
        grid(case, layer, d, name("B"), [[f"bW_{g}" for g in order] + [f"bR_{g}" for g in order]],
             fold_forget_bias=True, **lead),
    ]
    if case.peepholes:
        tensors.append(grid(case, layer, d, name("P"), [[f"p_{g}" for g in PEEPHOLE_ORDER]],
                            **lead))
    return tensors


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell_kind.reads("reset_after"):
        notes.append(
            f"GRU linear_before_reset={int(case.reset_after)}: "
            + ("n = tanh(W_h x + Wb_h + r * (R_h h + Rb_h)) (reset after)" if case.reset_after
               else "n = tanh(W_h x + Wb_h + R_h (r * h) + Rb_h) (reset before)"))
        notes.append("GRU: h' = (1 - z) * n + z * h")
    if case.gate_clip is not None:
        notes.append(f"clip={case.gate_clip}: every gate pre-activation is clamped "
                     "(not the cell state)")
    if case.input_forget:
        notes.append("input_forget=1: f = 1 - i")
    if case.dir_mode == "reverse":
        notes.append("direction=reverse: the reverse weights sit at index 0 of the direction axis")
    if case.num_layers > 1:
        notes.append("one ONNX node per layer; layer k+1 reads layer k's Y transposed to "
                     "[T, N, D*H] (forward features first)")
    return notes


def optional(case: Case) -> dict[str, OptionalTensor]:
    """ONNX's optional inputs with the operator's defaults: ``B`` and ``P`` zeros (a file
    without them is the node without them); ``sequence_lens``, ``initial_h``, ``initial_c``
    (data, not weights: they belong in the inputs file) accepted at their defaults only."""
    D, H, N = case.num_directions, case.hidden_size, case.batch
    gates = len(ORDER[case.cell])
    lengths = tuple(case.seq_lengths) if case.seq_lengths else (case.seq_len,) * N
    out: dict[str, OptionalTensor] = {}
    for k in range(case.num_layers):
        out[tensor_name(case, k, "B")] = OptionalTensor((D, 2 * gates * H))
        if case.cell_kind.has_cell_state:
            out[tensor_name(case, k, "P")] = OptionalTensor(
                (D, 3 * H), why="the case has no peepholes (set peepholes: true)")
        states = ("initial_h", "initial_c") if case.cell_kind.has_cell_state else ("initial_h",)
        for s in states:
            out[tensor_name(case, k, s)] = OptionalTensor(
                (D, N, H), why="initial states belong in the inputs file "
                "(h0, c0: docs/cases.md), not with the weights")
    out["sequence_lens"] = OptionalTensor(
        (N,), lengths, why="lengths belong in the case (seq_lengths) or the inputs file "
        "(seq_lengths), not with the weights")
    return out


ONNX = Layout(
    name="onnx",
    title="ONNX LSTM / GRU operator inputs W, R, B, P",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
    optional=optional,
)
