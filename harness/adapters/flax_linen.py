"""Flax linen ``LSTMCell`` / ``GRUCell`` under ``nn.RNN`` (``nn.Bidirectional`` for two
directions), JAX on CPU (layout ``flax``).

The executor is :mod:`harness.adapters._flax`: one jitted function per case shape, float64
under ``jax.enable_x64`` for the call only, the LSTM carry handed over as flax's ``(c, h)``
(google/flax#5469), padded outputs written 0. Gradient cases: ``jax.vjp`` of the same function.
"""

from __future__ import annotations

from harness.adapters._flax import FLAX_REASONS, FlaxAdapter, linen_layer
from harness.adapters.base import Capabilities


class FlaxLinen(FlaxAdapter):
    name = "flax-linen"
    title = "Flax linen LSTMCell/GRUCell under nn.RNN, JAX (CPU)"
    make_run_layer = staticmethod(linen_layer)
    cell_names = {"lstm": "LSTMCell", "gru": "GRUCell"}
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        gru_reset_after=frozenset({True}),
        gradients=True,
        reasons=FLAX_REASONS,
    )
