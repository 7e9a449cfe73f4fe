"""TensorFlow's fused CPU LSTM kernels ``tf.raw_ops.BlockLSTM`` (layout ``tf-block``) and
``tf.raw_ops.BlockLSTMV2`` (layout ``tf-block-v2``), LAYOUTS.md §4.

One op call runs one layer in one direction, time-major, from one initial state, with a
batch-wide ``seq_len_max`` and no per-sequence lengths. :func:`run_layers` (shared with the
``tf-legacy`` adapter) builds the rest around a one-direction runner, with TF ops only, so that
a gradient case differentiates the whole of it under one ``tf.GradientTape`` (:func:`run_tf`):

- layers: layer l > 0 reads the concatenated [forward, backward] outputs of layer l − 1;
- backward direction: each sequence is reversed within its own length before the run and the
  outputs are reversed back (``tf.gather``, whose gradient scatters back), so the valid steps
  come first in reading order and the padding after them;
- variable lengths: a forward run is causal, so the steps past a sequence's length cannot
  change its valid steps; its final state is read at its last valid step (BlockLSTM outputs
  ``h`` and ``cs`` for every step, so that is an index), and padded steps of ``y`` are zeroed
  (``tf.where``: no gradient flows from them, as in the reference where they do not exist).

Backward pass (gradient cases): ``tf.GradientTape`` over the forward above, with ``x``,
``h0``, ``c0`` and every native tensor (``w``, ``b``, ``wci``, ``wcf``, ``wco``) watched, and the
upstream gradients ``dy``, ``dh_n``, ``dc_n`` as the tape's output gradients, i.e. the gradient
of L = Σ dy ⊙ y + Σ dh_n ⊙ h_n + Σ dc_n ⊙ c_n. BlockLSTM's gradient is the one TF registers
(``tensorflow/python/ops/rnn_grad.py``): the ``BlockLSTMGrad`` op. BlockLSTMV2 is different, see
:class:`TFBlockLSTMV2`.

Deliberately independent of ``harness.reference`` (its own reversal index), so that a mistake
in the reference's direction handling cannot cancel out here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.params import DIRECTION_NAMES
from harness.spec import Case

# (layer, direction, x [B, T, in_l] in reading order with every sequence's valid steps first,
#  lengths [B] (NumPy), h0 [B, P or H], c0 [B, H] or None)
#  -> (y [B, T, P or H] in reading order (padded steps: anything), h_n, c_n or None), where
#  h_n / c_n are each sequence's state after its last valid step; all TF tensors in the case
#  dtype, computed with differentiable TF ops.
DirectionRunner = Callable[
    [int, int, Any, np.ndarray, Any, Any],
    tuple[Any, Any, Any],
]


def import_tf():
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise Unavailable(f"tensorflow is not installed ({exc}); pip install tensorflow") from None
    return tf


def native_name(case: Case, layer: int, d: int, name: str) -> str:
    """The native key of ``name`` for (layer, d): bare for one unidirectional layer, else
    ``layer{k}/{forward|backward}/name`` (the layouts' ``scoped_names``)."""
    if case.num_layers == 1 and case.num_directions == 1:
        return name
    return f"layer{layer}/{DIRECTION_NAMES[d]}/{name}"


def reverse_within_lengths(lengths: np.ndarray, T: int) -> np.ndarray:
    """idx [B, T] with ``x[b, idx[b, t]]`` the sequence b read backwards within its length;
    padded steps stay where they are. The map is its own inverse."""
    t = np.arange(T)[None, :]
    n = lengths[:, None]
    return np.where(t < n, n - 1 - t, t)


def to_tf(a: np.ndarray, dtype: Any) -> Any:
    """A constant in the case dtype; every value is already rounded to it, so the cast is exact
    (none where ``a`` already is in the case dtype)."""
    tf = import_tf()
    return tf.cast(tf.constant(a), dtype)


def to_f64(a: Any) -> np.ndarray:
    return import_tf().cast(a, "float64").numpy()


def run_layers(case: Case, inputs: Inputs, run_direction: DirectionRunner, x: Any, h0: Any,
               c0: Any) -> tuple[Any, Any, Any, list[Any]]:
    """Stack layers and directions of one-direction runs, in TF ops: ``x`` [B, T, I], ``h0``
    [L*D, B, P or H], ``c0`` [L*D, B, H] or None (TF tensors in the case dtype) ->
    (y, h_n, c_n or None, every layer's y) as TF tensors in the harness conventions."""
    tf = import_tf()
    B, T = inputs.x.shape[:2]
    lengths = inputs.lengths
    valid = tf.constant((np.arange(T)[None, :] < lengths[:, None])[..., None])  # [B, T, 1]
    rev = tf.constant(reverse_within_lengths(lengths, T))
    D = case.num_directions

    layer_in = x
    h_n, c_n, y_layers = [], [], []
    for layer in range(case.num_layers):
        outs = []
        for k, d in enumerate(case.directions):
            s = layer * D + k
            xs = layer_in if d == 0 else tf.gather(layer_in, rev, axis=1, batch_dims=1)
            y, h, c = run_direction(layer, d, xs, lengths, h0[s],
                                    c0[s] if c0 is not None else None)
            if d == 1:
                y = tf.gather(y, rev, axis=1, batch_dims=1)
            outs.append(tf.where(valid, y, tf.zeros_like(y)))  # the contract: padded y is 0
            h_n.append(h)
            c_n.append(c)
        layer_in = tf.concat(outs, axis=-1)
        y_layers.append(layer_in)
    return layer_in, tf.stack(h_n), tf.stack(c_n) if case.cell == "lstm" else None, y_layers


def run_tf(adapter: Adapter, case: Case, inputs: Inputs, weights: dict[str, Any],
           run_direction: DirectionRunner) -> Outputs:
    """Run :func:`run_layers` and, for a gradient case, differentiate it.

    ``weights`` maps native names to the TF tensors or variables ``run_direction`` reads (in the
    case dtype); for a gradient case they are watched with ``x``, ``h0``, ``c0``, and the tape's
    output gradients are ``dy``, ``dh_n``, ``dc_n``: the gradient of the loss in
    ``harness.data``. Returns float64 NumPy outputs, with ``grads`` keyed by native name."""
    tf = import_tf()
    dtype = tf.dtypes.as_dtype(case.dtype)
    lstm = case.cell == "lstm"
    x, h0 = to_tf(inputs.x, dtype), to_tf(inputs.h0, dtype)
    c0 = to_tf(inputs.c0, dtype) if lstm else None
    backward = adapter.computes_gradients(case)
    sources = [x, h0] + ([c0] if lstm else []) + list(weights.values())
    # only what is watched explicitly: the cells' variables are in ``weights``
    with (tf.GradientTape(watch_accessed_variables=False) if backward
          else contextlib.nullcontext()) as tape:
        if backward:
            tape.watch(sources)
        y, h_n, c_n, y_layers = run_layers(case, inputs, run_direction, x, h0, c0)
    out = Outputs(y=to_f64(y), h_n=to_f64(h_n), c_n=to_f64(c_n) if lstm else None,
                  y_layers=[to_f64(v) for v in y_layers])
    if backward:
        targets = [y, h_n] + ([c_n] if lstm else [])
        upstream = [inputs.dy, inputs.dh_n] + ([inputs.dc_n] if lstm else [])
        got = tape.gradient(targets, sources, output_gradients=[to_tf(u, dtype) for u in upstream],
                            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        got = [to_f64(g) for g in got]
        dx, dh0 = got[0], got[1]
        dc0 = got[2] if lstm else None
        params = dict(zip(weights, got[3 if lstm else 2:], strict=True))
        out.grads = Gradients(dx=dx, dh0=dh0, dc0=dc0, params=params)
    return out


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
        # turns clipping off (LAYOUTS.md §4).
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
    themselves; tests/test_adapter_gradients_tf.py). Like BlockLSTMGrad, BlockLSTMGradV2
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
