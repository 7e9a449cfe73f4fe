"""PyTorch ``nn.LSTM`` / ``nn.GRU``: ``state_dict()`` names.

    weight_ih_l{k}[_reverse]  [4H, in_k]   gates i f g o (GRU r z n) stacked along rows
    weight_hh_l{k}[_reverse]  [4H, P or H]
    bias_ih_l{k}, bias_hh_l{k} [4H]         both added (GRU: bias_hh's n block is inside r ⊙ (...))
    weight_hr_l{k}[_reverse]  [P, H]        LSTM projection

PyTorch has no runtime forget bias: a case's ``forget_bias`` is stored in ``bias_ih``'s f block.
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case

ORDER = {"lstm": "ifgo", "gru": "rzn"}


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
    order = ORDER[case.cell]
    tensors = [
        fused(case, layer, d, f"weight_ih{sfx}", "W", order, axis=0),
        fused(case, layer, d, f"weight_hh{sfx}", "R", order, axis=0),
        fused(case, layer, d, f"bias_ih{sfx}", "bW", order, fold_forget_bias=True),
        fused(case, layer, d, f"bias_hh{sfx}", "bR", order),
    ]
    if case.proj_size:
        tensors.append(grid(case, layer, d, f"weight_hr{sfx}", [["Wp"]]))
    return tensors


TORCH = Layout(
    name="torch",
    title="PyTorch nn.LSTM / nn.GRU state_dict",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=lambda case: (
        ["GRU: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)) (reset after)"]
        if case.cell_kind.reads("reset_after") else []
    ),
)
