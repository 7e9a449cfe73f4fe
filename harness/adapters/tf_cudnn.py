"""TensorFlow's cuDNN RNN ops on the GPU (layout ``tf-cudnn``), docs/layouts.md, tf-cudnn;
tf-cudnn-params.

One ``tf.raw_ops.CudnnRNNV3`` call runs the whole stack (every layer, both directions,
``num_proj``, per-sequence ``sequence_lengths``) on the opaque parameter buffer that
``tf.raw_ops.CudnnRNNCanonicalToParamsV2`` packs from the canonical weights. The adapter
hands those weights over as the op wants them (:func:`harness.cudnn.tf_lists`: pseudo-layer
major, linLayerID order) and transposes ``x`` to time-major; cuDNN does the rest: zeros at
padded steps, the backward direction starting at each sequence's last valid step, final states
at the last valid step. This is what TF1's ``CudnnLSTM`` / ``CudnnGRU`` ran (seed 000).

Backward pass (gradient cases): ``tf.GradientTape`` over ``CudnnRNNV3`` with
``is_training=True`` (its registered gradient, ``tensorflow/python/ops/cudnn_rnn_grad.py``, runs
the ``CudnnRNNBackpropV3`` op on the forward's reserve space), with ``x``, ``h0``, ``c0`` and
the parameter buffer watched and ``dy``, ``dh_n``, ``dc_n`` as output gradients.
``CudnnRNNCanonicalToParamsV2`` has no registered gradient, so the tape stops at the buffer and
its gradient is read back per tensor the way the buffer was packed: with
``CudnnRNNParamsToCanonicalV2`` after TF's packer, with :func:`tf_params_adjoint` after the
NumPy one (both are the adjoint of a packing that copies every tensor into its own region).

TF's cuDNN ops have no CPU kernel (docs/layouts.md, keras-cudnn), so the adapter is unavailable
without a
visible GPU. TF32 is switched off for the call (TensorFlow enables it by default for float32
on Ampere+) and restored afterwards. bfloat16: the buffer is packed in float32 and cast
(exact: every value is a bfloat16 number); TF's CudnnRNN kernels compute bfloat16 in float32.

A guard: in the XLA stream executor read for this adapter (``xla/stream_executor/cuda/
cuda_dnn.cc``, ``CudnnRnnParamsDescriptor::Create``), the size of each bias region is read
from the matrix descriptor (its ``get_size`` lambda ignores its argument), and
``CudnnRNNCanonicalToParams`` CHECK-fails, aborting the process, when a tensor's size differs
from its region's. Before the first run the adapter therefore probes the region table with
``CudnnRNNParamsToCanonicalV2``, which reports the same mismatch as an error instead. If the
table is broken, the buffer is packed in NumPy (:func:`harness.cudnn.tf_params`, layout
``tf-cudnn-params``), a warning says so, and ``versions()`` records which packer ran.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from harness.adapters._tf import CUDNN_REASONS, import_tf_gpu, tf32_off, tf_versions
from harness.adapters.base import Adapter, Capabilities
from harness.attribution import CPU
from harness.cudnn import (
    regions,
    scoped,
    tf_bias_name,
    tf_lists,
    tf_native_names,
    tf_params,
    tf_weight_name,
)
from harness.data import Gradients, Inputs, Outputs
from harness.spec import Case


def tf_packer_works(tf: Any) -> bool:
    """Whether TF's cuDNN region table gives the biases their own size (module docstring):
    ``CudnnRNNParamsToCanonicalV2`` on a small LSTM reports a wrong bias size as an error."""
    attrs = dict(num_layers=1, num_units=3, input_size=2, rnn_mode="lstm")
    with tf.device("/GPU:0"):
        size = tf.raw_ops.CudnnRNNParamsSize(T=tf.float32, S=tf.int32, **attrs)
        try:
            tf.raw_ops.CudnnRNNParamsToCanonicalV2(
                params=tf.zeros(size, tf.float32), num_params_weights=8, num_params_biases=8,
                **attrs)
        except tf.errors.InvalidArgumentError:
            return False
    return True


class TFCuDNN(Adapter):
    name = "tf-cudnn"
    reruns = ((CPU, "keras"),)  # TF32 is off already: the same TF build on CPU
    title = "TF CudnnRNNV3 with CudnnRNNCanonicalToParamsV2 (GPU)"
    framework = "tensorflow"
    requires = ("tensorflow",)
    device = "gpu"
    layout_name = "tf-cudnn"
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        gradients=True,
        reasons=CUDNN_REASONS,
    )

    _tf_packer: bool | None = None  # probed once: does CudnnRNNCanonicalToParamsV2 work?

    def check_available(self) -> None:
        import_tf_gpu()

    def versions(self) -> dict[str, str]:
        tf = import_tf_gpu()
        packer = ("CudnnRNNCanonicalToParamsV2" if self.uses_tf_packer(tf) else
                  "NumPy (harness.cudnn.tf_params): TF's bias regions are broken")
        return {**tf_versions(tf), "params_packed_by": packer}

    def uses_tf_packer(self, tf: Any) -> bool:
        if self._tf_packer is None:
            self._tf_packer = tf_packer_works(tf)
            if not self._tf_packer:
                warnings.warn("tf-cudnn: TF's cuDNN parameter regions give biases a wrong size "
                              "(CudnnRNNCanonicalToParamsV2 would abort); packing the buffer "
                              "in NumPy instead", RuntimeWarning, stacklevel=2)
        return self._tf_packer

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        import tensorflow as tf  # availability was checked by the runner

        dtype = tf.as_dtype(case.dtype)
        # CudnnRNNCanonicalToParams may lack a bfloat16 kernel: pack in float32, cast (exact)
        pack_dtype = tf.float32 if case.dtype == "bfloat16" else dtype

        def tensor(a: np.ndarray, to: Any = dtype) -> Any:
            return tf.cast(tf.constant(np.asarray(a, dtype=np.float64)), to)

        def f64(t: Any) -> np.ndarray:
            return np.asarray(t.numpy()).astype(np.float64)

        lstm = case.cell_kind.has_cell_state
        backward = self.computes_gradients(case)
        direction = "bidirectional" if case.num_directions == 2 else "unidirectional"
        attrs = dict(rnn_mode=case.cell, input_mode="linear_input", direction=direction,
                     dropout=0.0, seed=0, seed2=0, num_proj=case.proj_size)
        sizes = dict(num_layers=tf.constant(case.num_layers, tf.int32),
                     num_units=tf.constant(case.hidden_size, tf.int32),
                     input_size=tf.constant(case.input_size, tf.int32))
        weights, biases = tf_lists(native, case)
        lengths = inputs.lengths.astype(np.int32)
        with tf32_off(tf), tf.device("/GPU:0"):
            tf_packer = self.uses_tf_packer(tf)
            if tf_packer:
                params = tf.raw_ops.CudnnRNNCanonicalToParamsV2(
                    weights=[tensor(w, pack_dtype) for w in weights],
                    biases=[tensor(b, pack_dtype) for b in biases],
                    **sizes, **attrs,
                )
            else:
                params = tensor(tf_params(native, case), pack_dtype)
            params = tf.cast(params, dtype)
            x = tensor(np.transpose(inputs.x, (1, 0, 2)))  # time-major [T, B, I]
            h0 = tensor(inputs.h0)  # [L*D, B, P or H]
            c0 = tensor(inputs.c0) if lstm else tf.constant(0, dtype)
            sources = [x, h0, params] + ([c0] if lstm else [])
            # CudnnRNNCanonicalToParams has no registered gradient: the tape stops at the
            # buffer, whose gradient is read back per tensor below
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                y, h_n, c_n, _, _ = tf.raw_ops.CudnnRNNV3(
                    input=x, input_h=h0, input_c=c0, params=params,
                    sequence_lengths=tf.constant(lengths),
                    is_training=backward,  # the registered gradient needs the reserve space
                    time_major=True,
                    **attrs,
                )
            out = Outputs(
                y=np.transpose(f64(y), (1, 0, 2)),
                h_n=f64(h_n),
                c_n=f64(c_n) if lstm else None,
            )
            if not backward:
                return out
            # the gradient TF registers for CudnnRNNV3: the CudnnRNNBackpropV3 op
            targets = [y, h_n] + ([c_n] if lstm else [])
            upstream = [np.transpose(inputs.dy, (1, 0, 2)), inputs.dh_n]
            upstream += [inputs.dc_n] if lstm else []
            got = tape.gradient(targets, sources, output_gradients=[tensor(u) for u in upstream],
                                unconnected_gradients=tf.UnconnectedGradients.ZERO)
            dparams = got[2]
            if tf_packer:  # TF reads the buffer back through the regions it packed it by
                weight_keys, bias_keys = tf_native_names(case)
                blocks = tf.raw_ops.CudnnRNNParamsToCanonicalV2(
                    params=tf.cast(dparams, pack_dtype), num_params_weights=len(weight_keys),
                    num_params_biases=len(bias_keys), **sizes, **attrs)
                grads = {k: f64(b) for k, b in zip(weight_keys + bias_keys, blocks, strict=True)}
            else:
                grads = tf_params_adjoint(f64(dparams), case)
        out.grads = Gradients(
            dx=np.transpose(f64(got[0]), (1, 0, 2)),
            dh0=f64(got[1]),
            dc0=f64(got[3]) if lstm else None,
            params=grads,
        )
        return out


def tf_params_adjoint(dparams: np.ndarray, case: Case) -> dict[str, np.ndarray]:
    """The adjoint of :func:`harness.cudnn.tf_params`: the gradient of every ``tf-cudnn`` tensor
    from the gradient of the flat buffer. ``tf_params`` copies each tensor into its own region,
    so its gradient is that region of ``dparams``, reshaped (C order) to the tensor's shape."""
    out = {}
    for r in regions(case):
        name = tf_bias_name(r.lin_id) if r.is_bias else tf_weight_name(r.lin_id)
        out[scoped(case, r.layer, r.direction, name)] = (
            dparams[r.offset:r.offset + r.size].reshape(r.shape).copy())
    return out
