"""MLX ``mlx.nn.LSTM`` / ``mlx.nn.GRU`` on the CPU (``mlx[cpu]`` on Linux; layout ``mlx``).

MLX's recurrent modules are one layer, one direction, written as a Python loop of MLX ops over
the steps (the input projections precomputed in one ``addmm``), evaluated lazily: the adapter
builds one module per layer and direction, runs the reverse direction on the flipped sequence
and flips its outputs back, and concatenates a bidirectional layer's two outputs.

The initial state: a case's ``initial_state: none`` is omitted (``hidden=None``, ``cell=None``),
as a user does, so MLX's own t = 0 branch runs; zeros and random states are passed. That
branch is where mlx#3249 lived (a GRU with ``hidden=None`` dropped ``bhn`` at t = 0, from v0.7.0
until the fix in 0.32): with the installed fixed release, tests/adapters/test_adapter_mlx.py
plants the old branch and sees it DIVERGED on ``none`` and passing on ``zeros``
(cases/initial-state-omitted.yaml runs the fixed one). The reason says which form ran.

No masking in MLX's modules: variable-length batches are not applicable. Forward only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.params import DIRECTION_NAMES
from harness.spec import Case

REASONS = {
    "peepholes": "MLX nn.LSTM has no peephole connections",
    "projection": "MLX nn.LSTM has no projection",
    "gru_reset_after": "MLX nn.GRU is reset-after only (reset_after=false needs reset-before)",
    "cell_clip": "MLX nn.LSTM has no cell clipping",
    "gate_clip": "MLX nn.LSTM/nn.GRU have no gate pre-activation clipping",
    "input_forget": "MLX nn.LSTM has no coupled input-forget gate",
    "recurrent_activations": "MLX recurrent activations are fixed to sigmoid",
    "variable_lengths": "MLX nn.LSTM/nn.GRU take no mask or sequence lengths",
}


def import_mlx() -> tuple[Any, Any]:
    """(mlx.core, mlx.nn) on the CPU, or Unavailable."""
    try:
        import mlx.core as mx
        import mlx.nn as nn
    except ImportError as exc:
        raise Unavailable(f"mlx is not installed ({exc}); pip install 'mlx[cpu]>=0.32.4'"
                          ) from None
    return mx, nn


class MLX(Adapter):
    name = "mlx"
    title = "MLX nn.LSTM/nn.GRU (CPU)"
    framework = "mlx"
    requires = ("mlx",)
    layout_name = "mlx"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        gru_reset_after=frozenset({True}),
        # mlx.core.sigmoid of a float64 array is float32-accurate (1.06e-8 off at 0.1, mlx
        # 0.32.4; tanh is exact): a float64 LSTM/GRU is ~1e-8 off. Run anyway by
        # tests/adapters/test_adapter_mlx.py, which checks it still diverges
        dtypes=frozenset({"float32", "float16", "bfloat16"}),
        variable_lengths=False,
        reasons=REASONS | {"dtypes": "MLX computes a float64 sigmoid to float32 accuracy "
                                     "(mlx 0.32.4: 1e-8 off), so a float64 LSTM/GRU is ~1e-8 off"},
    )

    def check_available(self) -> None:
        mx, _ = import_mlx()
        mx.set_default_device(mx.cpu)

    def versions(self) -> dict[str, str]:
        import importlib.metadata

        mx, _ = import_mlx()
        return {"mlx": mx.__version__, "mlx_device": str(mx.default_device()),
                "mlx-cpu": importlib.metadata.version("mlx-cpu")}

    def module(self, nn: Any, case: Case, input_size: int) -> Any:
        """One layer, one direction: MLX's own LSTM/GRU (a test plants an older one here)."""
        cls = nn.LSTM if case.cell_kind.has_cell_state else nn.GRU
        return cls(input_size, case.hidden_size)

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        mx, nn = import_mlx()
        dtype = getattr(mx, case.dtype)
        lstm = case.cell_kind.has_cell_state
        omit = case.initial_state == "none"  # MLX's own zero-state branch (hidden=None)
        single = case.num_layers == 1 and case.num_directions == 1

        def array(a: np.ndarray) -> Any:
            # float64 -> the case dtype inside MLX (NumPy has no bfloat16); mx.array makes a
            # float64 NumPy array float32 unless told its dtype
            return mx.array(np.asarray(a, dtype=np.float64), dtype=mx.float64).astype(dtype)

        layer_in = array(inputs.x)
        h_n, c_n, y_layers = [], [], []
        for layer in range(case.num_layers):
            outs = []
            for k, d in enumerate(case.directions):
                prefix = "" if single else f"layer{layer}/{DIRECTION_NAMES[d]}/"
                m = self.module(nn, case, case.layer_input_size(layer))
                m.update({n: array(native[prefix + n]) for n in m.parameters()})
                s = layer * case.num_directions + k
                hidden = None if omit else array(inputs.h0[s])
                cell = None if omit or not lstm else array(inputs.c0[s])
                seq = layer_in[:, ::-1, :] if d == 1 else layer_in
                if lstm:
                    y, c = m(seq, hidden, cell)
                    c_n.append(c[:, -1, :])
                else:
                    y = m(seq, hidden)
                h_n.append(y[:, -1, :])
                outs.append(y[:, ::-1, :] if d == 1 else y)
            layer_in = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=-1)
            y_layers.append(layer_in)
        mx.eval(layer_in, *h_n, *c_n)

        def f64(a: Any) -> np.ndarray:
            return np.asarray(a.astype(mx.float64) if a.dtype != mx.float64 else a
                              ).astype(np.float64)

        state = ("initial state omitted (hidden=None: MLX's zero-state branch)" if omit
                 else "initial state passed")
        return Outputs(y=f64(layer_in), h_n=np.stack([f64(h) for h in h_n]),
                       c_n=np.stack([f64(c) for c in c_n]) if lstm else None,
                       y_layers=[f64(v) for v in y_layers],
                       note=f"mlx.nn.{'LSTM' if lstm else 'GRU'}: a loop of MLX ops over the "
                            f"steps, one module per layer and direction; {state}")
