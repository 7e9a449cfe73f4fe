"""Flax linen ``OptimizedLSTMCell`` under ``nn.RNN``, JAX (CPU) (layout ``flax``).

The same parameter tree as ``LSTMCell`` (one Dense per gate), concatenated at call time into one
input and one hidden matmul: the arithmetic differs, the storage does not. There is no optimized
GRU cell. The executor is :mod:`harness.adapters._flax`, as for ``flax-linen``.
"""

from __future__ import annotations

from harness.adapters._flax import FLAX_REASONS, FlaxAdapter, linen_layer
from harness.adapters.base import Capabilities


class FlaxLinenOptimized(FlaxAdapter):
    name = "flax-linen-optimized"
    named_only = ("a jit compile per case (about 0.3 s) of flax-linen's fused-gate LSTM "
                  "variant, whose layout and equations flax-linen covers by default")
    title = "Flax linen OptimizedLSTMCell under nn.RNN, JAX (CPU)"
    make_run_layer = staticmethod(linen_layer)
    cell_names = {"lstm": "OptimizedLSTMCell"}
    capabilities = Capabilities(
        cells=frozenset({"lstm"}),
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        gradients=True,
        reasons={**FLAX_REASONS, "cells": "flax has no optimized GRU cell (OptimizedLSTMCell "
                                          "only; GRUCell runs under flax-linen)"},
    )
