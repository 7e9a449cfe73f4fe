"""Flax nnx ``OptimizedLSTMCell`` / ``GRUCell`` under ``nnx.RNN`` (``nnx.Bidirectional`` for two
directions), JAX on CPU (layout ``flax-nnx``).

nnx's ``OptimizedLSTMCell`` and ``GRUCell`` store each direction fused, one input and one hidden
``Linear`` (``dense_i``, ``dense_h``), unlike linen's one ``Dense`` per gate; nnx's
``LSTMCell`` stores and computes as linen's and is covered by ``flax-linen``. nnx's GRUCell has
no ``b_hn`` (google/flax#5594): the adapter runs the cell as nnx has it, so the canonical
``bR_n`` is dropped by the layout and every GRU case whose ``bR_n`` is not zero diverges; the
bundled GRU cases declare it (``expected: {flax-nnx: ..., when: {cell: gru}}``). The executor is
:mod:`harness.adapters._flax`, as for the linen adapters.
"""

from __future__ import annotations

from harness.adapters._flax import FLAX_REASONS, FlaxAdapter, nnx_layer
from harness.adapters.base import Capabilities


class FlaxNnx(FlaxAdapter):
    name = "flax-nnx"
    title = "Flax nnx OptimizedLSTMCell/GRUCell under nnx.RNN, JAX (CPU)"
    layout_name = "flax-nnx"
    flax_api = "nnx"
    make_run_layer = staticmethod(nnx_layer)
    cell_names = {"lstm": "OptimizedLSTMCell", "gru": "GRUCell"}
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        gru_reset_after=frozenset({True}),
        gradients=True,
        reasons={**FLAX_REASONS, "gru_reset_after": "nnx's GRUCell applies the reset gate "
                 "after the recurrent matmul (r * (h @ dense_h[n]), no b_hn: google/flax#5594): "
                 "it has no reset_after=False form"},
    )
