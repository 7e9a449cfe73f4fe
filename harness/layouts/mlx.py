"""MLX ``mlx.nn.LSTM`` / ``mlx.nn.GRU``: the module's own parameters, one module per layer and
direction (MLX has no stacked or bidirectional RNN), named ``layer{k}/{forward|backward}/``
+ the parameter (bare for one unidirectional layer):

    LSTM  Wx    [4H, in_k]   gates i f g o stacked along rows
          Wh    [4H, H]
          bias  [4H]         bW_g + bR_g summed (one bias: only the sum acts)
    GRU   Wx    [3H, in_k]   gates r z n stacked along rows
          Wh    [3H, H]
          b     [3H]         r, z: bW + bR summed; n: bW_n only
          bhn   [H]          bR_n, inside r * (Wh_n h + bhn) (reset after)

MLX has no runtime forget bias: a case's ``forget_bias`` is stored in ``bias``'s f block. The
mapping is probe-confirmed (tests/adapters/test_adapter_mlx.py).
"""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, fused, grid
from harness.spec import Case


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    cell = case.cell_kind
    order = cell.gates  # MLX's row order is the canonical one for both cells
    tensors = [
        fused(case, layer, d, "Wx", "W", order, axis=0),
        fused(case, layer, d, "Wh", "R", order, axis=0),
    ]
    if cell.has_cell_state:
        tensors.append(fused(case, layer, d, "bias", ("bW", "bR"), order, fold_forget_bias=True))
        return tensors
    # the reset gate's candidate keeps its recurrent bias apart (inside r * (...))
    apart = cell.candidate
    tensors.append(grid(case, layer, d, "b", [[f"bW_{g}" if g == apart else (f"bW_{g}", f"bR_{g}")
                                                for g in order]]))
    tensors.append(grid(case, layer, d, "bhn", [[f"bR_{apart}"]]))
    return tensors


def runtime(case: Case) -> list[str]:
    if case.cell_kind.has_cell_state:
        return ["LSTM: hidden=None, cell=None start from zero states (c = i * g at t = 0)"]
    return ["GRU (reset after): n = tanh(Wx_n x + b_n + r * (Wh_n h + bhn)); "
            "h' = (1 - z) * n + z * h; hidden=None: h = 0 and n = tanh(Wx_n x + b_n + r * bhn) "
            "(mlx#3249: before mlx 0.32 bhn was dropped there)"]


MLX = Layout(
    name="mlx",
    title="MLX mlx.nn.LSTM / mlx.nn.GRU parameters (Wx, Wh, bias / b, bhn), one per layer "
          "and direction",
    cells=("lstm", "gru"),
    describe=describe,
    runtime=runtime,
    scoped_names=True,
)
