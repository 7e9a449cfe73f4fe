"""TF1-style ``LSTMCell`` / ``GRUCell`` from ``tf_keras.src.layers.rnn.legacy_cells`` (formerly
``tf.nn.rnn_cell``), layout ``tf-legacy``, docs/layouts.md, tf-legacy.

Each (layer, direction) gets its own cell, built and then loaded by variable name from the
layout's native tensors; the cell is called step by step in eager mode (unrolled over time).
At steps past a sequence's length the new state is discarded (the old one is kept), so the
final state is the one at the last valid step; :func:`~harness.adapters._tf.run_layers`
stacks layers, runs the backward direction on sequences reversed within their lengths, and
zeroes the padded steps of ``y``.

LSTMCell gets the case's ``forget_bias`` (its own default, 1.0, is added at run time and stored
nowhere), ``use_peepholes``, ``cell_clip``, ``num_proj`` and ``proj_clip``; its state is
``LSTMStateTuple(c, h)``, c first. GRUCell is reset-before only.

Backward pass (gradient cases): ``tf.GradientTape`` over the unrolled cells
(:func:`~harness.adapters._tf.run_tf`), differentiating the cells' own ops (``matmul``,
``sigmoid``, ``clip_by_value``: a clipped element gets no gradient, as in the reference) with
respect to ``x``, ``h0``, ``c0`` and every cell variable, keyed by its native name. A held state
is a ``tf.where``, so padded steps pass the gradient of the state through unchanged.
"""

from __future__ import annotations

import warnings

import numpy as np

from harness.adapters._tf import native_name, run_tf
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.tf import import_tf
from harness.spec import Case


def import_legacy_cells():
    import_tf()
    try:
        from tf_keras.src.layers.rnn import legacy_cells
    except ImportError as exc:
        raise Unavailable(f"tf_keras legacy cells cannot be imported ({exc}); "
                          "pip install tf_keras") from None
    return legacy_cells


class TFLegacy(Adapter):
    name = "tf-legacy"
    title = "TF1 LSTMCell / GRUCell (tf_keras legacy cells, unrolled, CPU)"
    framework = "tensorflow"
    requires = ("tensorflow", "tf_keras")
    layout_name = "tf-legacy"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        peepholes=True,
        projection=True,
        cell_clip=True,
        proj_clip=True,
        gradients=True,
        gru_reset_after=frozenset({False}),
        reasons={
            "gru_reset_after": "TF1 GRUCell is reset-before only (reset_after=true needs "
                               "CudnnCompatibleGRUCell, which no longer ships)",
            "gate_clip": "TF1 LSTMCell / GRUCell have no gate pre-activation clipping "
                         "(LSTMCell's cell_clip clips the cell state)",
            "input_forget": "TF1 LSTMCell has no coupled input-forget gate",
            "recurrent_activations": "TF1 LSTMCell / GRUCell gates use sigmoid (only the cell "
                                     "activation can be changed)",
        },
    )

    def check_available(self) -> None:
        import_legacy_cells()

    def versions(self) -> dict[str, str]:
        import tf_keras

        return {"tensorflow": import_tf().__version__, "tf_keras": tf_keras.__version__}

    def build(self, case: Case, native: dict[str, np.ndarray], layer: int, d: int):
        """The legacy cell of (layer, d), in the case dtype, holding the layout's tensors."""
        tf = import_tf()
        cells = import_legacy_cells()
        with warnings.catch_warnings():  # "tf.nn.rnn_cell.LSTMCell is deprecated"
            warnings.simplefilter("ignore", UserWarning)
            if case.cell_kind.has_cell_state:
                cell = cells.LSTMCell(
                    case.hidden_size, use_peepholes=case.peepholes, cell_clip=case.cell_clip,
                    num_proj=case.proj_size or None, proj_clip=case.proj_clip,
                    forget_bias=case.forget_bias, dtype=case.dtype)
            else:
                cell = cells.GRUCell(case.hidden_size, dtype=case.dtype)
        cell.build(tf.TensorShape([None, case.layer_input_size(layer)]))
        for v in cell.variables:
            value = native[native_name(case, layer, d, local_name(v))]
            assert tuple(v.shape) == value.shape, (v.name, v.shape, value.shape)
            v.assign(tf.cast(tf.constant(value), v.dtype))
        return cell

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf = import_tf()
        legacy = import_legacy_cells()
        lstm = case.cell_kind.has_cell_state
        cells = {(layer, d): self.build(case, native, layer, d)
                 for layer in range(case.num_layers) for d in case.directions}
        # native name -> the cell variable holding it (what a gradient case differentiates)
        weights = {native_name(case, layer, d, local_name(v)): v
                   for (layer, d), cell in cells.items() for v in cell.variables}

        def run_direction(layer, d, x, lengths, h0, c0):
            cell = cells[layer, d]
            state = legacy.LSTMStateTuple(c0, h0) if lstm else h0
            ys = []
            for step in range(x.shape[1]):
                y, new = cell(x[:, step], state)
                keep = tf.constant((step < lengths)[:, None])  # [B, 1]
                # past a sequence's length the state is held (tf.where: no gradient flows
                # through the discarded update)
                if lstm:
                    state = legacy.LSTMStateTuple(tf.where(keep, new.c, state.c),
                                                  tf.where(keep, new.h, state.h))
                else:
                    state = tf.where(keep, new, state)
                ys.append(y)
            y = tf.stack(ys, axis=1)
            return (y, state.h, state.c) if lstm else (y, state, None)

        return run_tf(self, case, inputs, weights, run_direction)


def local_name(variable) -> str:
    """A cell variable's name within its cell: "lstm_cell_3/projection/kernel:0" ->
    "projection/kernel"."""
    return variable.name.split(":")[0].split("/", 1)[1]
