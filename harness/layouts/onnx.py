"""ONNX ``LSTM`` / ``GRU`` operator weight inputs.

    W  [D, 4H, in_k]   gates i o f c (GRU z r h) stacked along rows, math orientation
    R  [D, 4H, H]      (GRU [D, 3H, H])
    B  [D, 8H]         [Wb_i Wb_o Wb_f Wb_c | Rb_i Rb_o Rb_f Rb_c]  (GRU [D, 6H], z r h)
    P  [D, 3H]         peepholes i o f (i, f see c_{t-1}; o sees c_t)

Directions are the leading axis of one tensor: forward is index 0 and reverse index 1 of a
bidirectional node; a ``direction="reverse"`` node has D = 1 and its reverse weights at index 0.
One node runs one layer, so a single layer uses the bare names ``W R B P`` and a stack prefixes
them with ``layer{k}/`` (the native weight files). ONNX has no runtime forget bias: a
case's ``forget_bias`` is stored in ``B``'s input-bias f block.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case

# Canonical gate names in ONNX's block order: LSTM i o f c (canonical g is ONNX's c), GRU z r h.
ORDER = {"lstm": "iofg", "gru": "zrn"}
PEEPHOLE_ORDER = "iof"


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
    if case.cell == "lstm" and case.peepholes:
        tensors.append(grid(case, layer, d, name("P"), [[f"p_{g}" for g in PEEPHOLE_ORDER]],
                            **lead))
    return tensors


def runtime(case: Case) -> list[str]:
    notes = []
    if case.cell == "gru":
        notes.append(
            f"GRU linear_before_reset={int(case.reset_after)}: "
            + ("n = tanh(W_h x + Wb_h + r * (R_h h + Rb_h)) (reset after)" if case.reset_after
               else "n = tanh(W_h x + Wb_h + R_h (r * h) + Rb_h) (reset before)"))
        notes.append("GRU: h' = (1 - z) * n + z * h")
    if case.gate_clip is not None:
        notes.append(f"clip={case.gate_clip}: every gate pre-activation is clamped "
                     "(not the cell state)")
    if case.cell == "lstm" and case.input_forget:
        notes.append("input_forget=1: f = 1 - i")
    if case.dir_mode == "reverse":
        notes.append("direction=reverse: the reverse weights sit at index 0 of the direction axis")
    if case.num_layers > 1:
        notes.append("one ONNX node per layer; layer k+1 reads layer k's Y transposed to "
                     "[T, N, D*H] (forward features first)")
    return notes


ONNX = Layout(
    name="onnx",
    title="ONNX LSTM / GRU operator inputs W, R, B, P",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
)
