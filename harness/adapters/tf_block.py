"""TensorFlow's fused CPU LSTM kernels ``tf.raw_ops.BlockLSTM`` (layout ``tf-block``) and
``tf.raw_ops.BlockLSTMV2`` (layout ``tf-block-v2``), docs/layouts.md, tf-block.

One op call runs one layer in one direction, time-major, from one initial state, with a
batch-wide ``seq_len_max`` and no per-sequence lengths. :func:`harness.adapters._tf.run_layers`
builds the rest (layers, the backward direction, variable lengths) around that one-direction
run, in TF ops; a sequence's final state is read at its last valid step (BlockLSTM outputs
``h`` and ``cs`` for every step, so that is an index).

Backward pass (gradient cases): ``tf.GradientTape`` over the forward above
(:func:`harness.adapters._tf.run_tf`), with ``x``, ``h0``, ``c0`` and every native tensor
(``w``, ``b``, ``wci``, ``wcf``, ``wco``) watched, and the upstream gradients ``dy``, ``dh_n``,
``dc_n`` as the tape's output gradients, i.e. the gradient of
L = Σ dy ⊙ y + Σ dh_n ⊙ h_n + Σ dc_n ⊙ c_n. BlockLSTM's gradient is the one TF registers
(``tensorflow/python/ops/rnn_grad.py``): the ``BlockLSTMGrad`` op. BlockLSTMV2 is different, see
:class:`TFBlockLSTMV2`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.adapters._tf import native_name, run_tf, to_tf
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.tf import import_tf
from harness.spec import Case


class TFBlockLSTM(Adapter):
    """``tf.raw_ops.BlockLSTM`` (v1): blocks i, ci, f, o; runtime forget_bias; cell_clip
    passed explicitly (the op's default of 3.0 would clip silently).

    Gradients: the one TF registers for BlockLSTM, the ``BlockLSTMGrad`` op. It has no
    ``cell_clip`` attribute and passes the gradient through the clip as if it were the identity
    (straight-through: measured equal, to 2e-7, to a float32 clip written
    ``c + stop_gradient(clip(c) - c)``; the true derivative is 0 where c is clipped, and with
    cell_clip=0.5, T=5, H=4 the gradients were off by 0.7 at a gradient scale of 3.7). A case
    with a ``cell_clip`` therefore has its gradients not compared (``gradient_reasons``); its
    forward pass is.
    """

    name = "tf-block"
    title = "TensorFlow BlockLSTM raw op (CPU)"
    framework = "tensorflow"
    requires = ("tensorflow",)
    layout_name = "tf-block"
    native_in_case_dtype = True
    op_name = "BlockLSTM"
    gradient_op: str | None = None  # None: the gradient TF registers for op_name
    capabilities = Capabilities(
        cells=frozenset({"lstm"}),
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        # CPU kernels are registered for float and half only (checked with
        # kernels.get_registered_kernels_for_op in TF 2.21)
        dtypes=frozenset({"float32", "float16"}),
        peepholes=True,
        cell_clip=True,
        gradients=True,
        gradient_reasons={"cell_clip": "TF BlockLSTMGrad has no cell_clip and differentiates "
                                       "the clip as the identity"},
        reasons={
            "cells": "TF BlockLSTM is an LSTM kernel (GRUBlockCell is another op)",
            "dtypes": "TF BlockLSTM has CPU kernels for float32 and float16 only",
            "projection": "TF BlockLSTM has no projection (num_proj)",
            "proj_clip": "TF BlockLSTM has no projection, so no proj_clip",
            "gate_clip": "TF BlockLSTM clips the cell state (cell_clip), not gate pre-activations",
            "input_forget": "TF BlockLSTM has no coupled input-forget gate",
            "recurrent_activations": "TF BlockLSTM gates are fixed to sigmoid",
        },
    )

    def check_available(self) -> None:
        tf = import_tf()
        if not hasattr(tf.raw_ops, self.op_name):
            raise Unavailable(f"tf.raw_ops.{self.op_name} is missing in TF {tf.__version__}")

    def versions(self) -> dict[str, str]:
        return {"tensorflow": import_tf().__version__}

    def op_attrs(self, case: Case) -> dict:
        # Always explicit: the op defaults are forget_bias=1.0 and cell_clip=3.0; a value <= 0
        # turns clipping off (docs/layouts.md, tf-block).
        return {
            "forget_bias": float(case.forget_bias),
            "cell_clip": float(case.cell_clip) if case.cell_clip is not None else -1.0,
        }

    def call_op(self, case: Case, **inputs: Any) -> tuple[Any, Any]:
        """One op call on time-major tensors -> (cs, h), each [T, B, H], differentiable: with
        ``gradient_op`` set, that op is attached with ``tf.custom_gradient`` instead of the
        gradient TF registers for the op."""
        tf = import_tf()
        op = getattr(tf.raw_ops, self.op_name)
        seq_len_max = inputs.pop("seq_len_max")
        attrs = dict(self.op_attrs(case), use_peephole=case.peepholes)
        names = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
        if self.gradient_op is None:
            out = op(seq_len_max=seq_len_max, **inputs, **attrs)
            return out.cs, out.h
        grad_op = getattr(tf.raw_ops, self.gradient_op)

        @tf.custom_gradient
        def block_lstm(*args):
            tensors = dict(zip(names, args, strict=True))
            out = op(seq_len_max=seq_len_max, **tensors, **attrs)

            def grad(cs_grad, h_grad):
                # the grad ops take the forward activations, and no cell_clip attribute
                g = grad_op(seq_len_max=seq_len_max, **tensors, i=out.i, cs=out.cs, f=out.f,
                            o=out.o, ci=out.ci, co=out.co, h=out.h,
                            cs_grad=zeros_if_none(cs_grad, out.cs),
                            h_grad=zeros_if_none(h_grad, out.h),
                            use_peephole=case.peepholes)
                # (x, cs_prev, h_prev, w, wci, wcf, wco, b) gradients, in the inputs' order
                return list(g)

            return (out.cs, out.h), grad

        cs, h = block_lstm(*(inputs[n] for n in names))
        return cs, h

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf = import_tf()
        dtype = tf.dtypes.as_dtype(case.dtype)
        weights = {name: to_tf(value, dtype) for name, value in native.items()}
        zeros = tf.zeros([case.hidden_size], dtype)  # use_peephole=False still wants wci...

        def run_direction(layer, d, x, lengths, h0, c0):
            def w(name):
                return weights[native_name(case, layer, d, name)]

            peep = [w(n) if case.peepholes else zeros for n in ("wci", "wcf", "wco")]
            cs, h = self.call_op(
                case,
                seq_len_max=tf.constant(int(lengths.max()), dtype=tf.int64),
                x=tf.transpose(x, (1, 0, 2)),  # the op is time-major
                cs_prev=c0, h_prev=h0, w=w("w"), wci=peep[0], wcf=peep[1], wco=peep[2],
                b=w("b"),
            )
            # outputs [T, B, H]; steps t >= seq_len_max are 0
            cs, h = tf.transpose(cs, (1, 0, 2)), tf.transpose(h, (1, 0, 2))
            last = tf.constant(lengths - 1)
            return (h, tf.gather(h, last, axis=1, batch_dims=1),
                    tf.gather(cs, last, axis=1, batch_dims=1))

        return run_tf(self, case, inputs, weights, run_direction)


def zeros_if_none(grad: Any, like: Any) -> Any:
    return import_tf().zeros_like(like) if grad is None else grad


class TFBlockLSTMV2(TFBlockLSTM):
    """``tf.raw_ops.BlockLSTMV2``: blocks i, f, g, o; no forget_bias attribute (the layout
    folds it into ``b``); cell_clip defaults to 0 (off), passed explicitly all the same.

    Gradients: the ``BlockLSTMGradV2`` op, attached with ``tf.custom_gradient``
    (:meth:`TFBlockLSTM.call_op`). The gradient TF 2.21 registers for BlockLSTMV2
    (``tensorflow/python/ops/rnn_grad.py``: ``RegisterGradient("BlockLSTMV2")`` of the same
    function as BlockLSTM) runs ``BlockLSTMGrad``, the v1 kernel with gate blocks i, ci, f, o,
    on V2's i, f, ci, o weights: every gradient is wrong (off by about as much as the gradients
    themselves; tests/adapters/test_adapter_gradients_tf.py). Like BlockLSTMGrad, BlockLSTMGradV2
    differentiates cell_clip as the identity.
    """

    name = "tf-block-v2"
    title = "TensorFlow BlockLSTMV2 raw op (CPU)"
    layout_name = "tf-block-v2"
    op_name = "BlockLSTMV2"
    gradient_op = "BlockLSTMGradV2"
    capabilities = Capabilities(
        cells=TFBlockLSTM.capabilities.cells,
        directions=TFBlockLSTM.capabilities.directions,
        dtypes=TFBlockLSTM.capabilities.dtypes,
        peepholes=True,
        cell_clip=True,
        gradients=True,
        reasons={k: v.replace("BlockLSTM", "BlockLSTMV2")
                 for k, v in TFBlockLSTM.capabilities.reasons.items()},
        gradient_reasons={k: v.replace("BlockLSTMGrad", "BlockLSTMGradV2")
                          for k, v in TFBlockLSTM.capabilities.gradient_reasons.items()},
    )

    def op_attrs(self, case: Case) -> dict:
        attrs = super().op_attrs(case)
        del attrs["forget_bias"]  # BlockLSTMV2 has no such attribute
        return attrs
