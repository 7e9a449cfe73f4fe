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

The stacking is :func:`harness.families.mlx.run_stack`, which a reproducer pastes: what
``_run`` hands MLX (module class and arguments, parameters by MLX's names, the inputs, whether
the state is omitted) is ``Outputs.handed`` (family ``mlx``, :meth:`MLX.hand`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.families import mlx as mlx_stack
from harness.handed import Handed
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

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """What :meth:`_run` hands MLX (family ``mlx``): the module class and its constructor
        arguments per layer, the case dtype, whether the initial state is omitted
        (``hidden=None``) or passed, how directions are built (:mod:`harness.families.mlx`);
        the parameters by MLX's own names (``param/...``) and the inputs (``feed/...``) as it
        got them."""
        arrays = {f"param/{k}": np.asarray(v) for k, v in native.items()}
        arrays |= {"feed/x": np.asarray(inputs.x), "feed/h0": np.asarray(inputs.h0)}
        if case.cell_kind.has_cell_state:
            arrays["feed/c0"] = np.asarray(inputs.c0)
        return Handed("mlx", {
            "framework": "mlx", "module": "LSTM" if case.cell_kind.has_cell_state else "GRU",
            "input_sizes": [case.layer_input_size(k) for k in range(case.num_layers)],
            "hidden_size": case.hidden_size, "bias": True, "dtype": case.dtype,
            "initial_state": "omitted" if case.initial_state == "none" else "passed",
            "stack": "one module per layer and direction; the reverse direction on the flipped "
                     "sequence, its outputs flipped back; a bidirectional layer's two outputs "
                     "concatenated"}, arrays=arrays)

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        mx, nn = import_mlx()
        lstm = case.cell_kind.has_cell_state
        omit = case.initial_state == "none"  # MLX's own zero-state branch (hidden=None)
        y_layers, h_n, c_n = mlx_stack.run_stack(
            mx, lambda layer: self.module(nn, case, case.layer_input_size(layer)), native,
            inputs.x, inputs.h0, inputs.c0 if lstm else None, dtype=getattr(mx, case.dtype),
            num_layers=case.num_layers, directions=list(case.directions), lstm=lstm,
            omit_state=omit)
        state = ("initial state omitted (hidden=None: MLX's zero-state branch)" if omit
                 else "initial state passed")
        return Outputs(y=y_layers[-1], h_n=h_n, c_n=c_n, y_layers=y_layers,
                       handed=self.hand(case, native, inputs),
                       note=f"mlx.nn.{'LSTM' if lstm else 'GRU'}: a loop of MLX ops over the "
                            f"steps, one module per layer and direction; {state}")
