"""Flax linen ``LSTMCell`` / ``GRUCell`` under ``nn.RNN`` (``nn.Bidirectional`` for two
directions), JAX on CPU (layout ``flax``).

The executor is :mod:`harness.adapters._flax`: one jitted function per case shape, float64
under ``jax.enable_x64`` for the call only, the LSTM carry handed over as flax's ``(c, h)``
(google/flax#5469), padded outputs written 0. Gradient cases: ``jax.vjp`` of the same function.
"""

from __future__ import annotations

import numpy as np

from harness.adapters._flax import import_flax, linen_layer, run
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case

# Why a case is not applicable to the flax cells (shared by the linen and nnx adapters).
FLAX_REASONS = {
    "peepholes": "flax LSTM cells have no peephole connections",
    "projection": "flax LSTM cells have no projection",
    "projection_layers": "flax LSTM cells have no projection",
    "cell_clip": "flax LSTM cells have no cell-state clipping",
    "proj_clip": "flax LSTM cells have no projection (nor its clipping)",
    "gate_clip": "flax LSTM/GRU cells have no gate pre-activation clipping",
    "input_forget": "flax LSTM cells have no coupled input-forget gate",
    "recurrent_activations": "the adapters run flax's default gate_fn (sigmoid)",
    "gru_reset_after": "flax's GRUCell applies the reset gate after the recurrent matmul "
                       "(r * (h @ hn/kernel + hn/bias)): it has no reset_after=False form",
}


class FlaxLinen(Adapter):
    name = "flax-linen"
    title = "Flax linen LSTMCell/GRUCell under nn.RNN, JAX (CPU)"
    framework = "jax"
    requires = ("jax", "flax")
    layout_name = "flax"
    native_in_case_dtype = True
    cell_names = {"lstm": "LSTMCell", "gru": "GRUCell"}
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        gru_reset_after=frozenset({True}),
        gradients=True,
        reasons=FLAX_REASONS,
    )

    def check_available(self) -> None:
        import_flax()

    def versions(self) -> dict[str, str]:
        jax, _, flax = import_flax()
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        _, _, flax = import_flax()
        from flax import linen as nn

        cell_cls = getattr(nn, self.cell_names[case.cell])
        return run(case, native, inputs, family=self.name,
                   run_layer=linen_layer(case, cell_cls),
                   gradients=self.computes_gradients(case))
