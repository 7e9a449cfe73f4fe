"""tf_keras ``CuDNNLSTM`` / ``CuDNNGRU`` (the v1 API) on the GPU (layout ``keras-cudnn``).

The layers of the seed-001 thread: each is one unidirectional single-layer cuDNN RNN that
packs its ``kernel`` / ``recurrent_kernel`` / ``bias`` into cuDNN's buffer at call time
(:func:`harness.cudnn.keras_params` reproduces that buffer in NumPy). The adapter builds one
layer per case layer and direction, loads it with ``set_weights`` from the layout's native
tensors (:func:`harness.cudnn.keras_weights`), and calls it eagerly:

- backward direction: ``go_backwards=True``, whose output (in reading order) is flipped back
  into input time order, as ``Bidirectional`` does;
- layer l > 0 reads the concatenated [forward, backward] outputs of layer l − 1.

The layers accept no mask (they always pass full-length ``sequence_lengths`` to cuDNN), so
variable-length batches are not applicable. TF32 is switched off around the call.

Gradient cases: the forward runs under a ``tf.GradientTape`` (cuDNN's own backward,
``CudnnRNNBackpropV3``) and :func:`harness.adapters._keras.backward` pulls the upstream
gradients back through the returned tensors, as for the CPU Keras adapters.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from harness.adapters._keras import backward, outputs_of
from harness.adapters._tf import CUDNN_REASONS, import_tf_gpu, tf32_off, tf_versions
from harness.adapters.base import Adapter, Capabilities
from harness.attribution import CPU
from harness.cudnn import KERAS_NAMES, keras_weights, scoped
from harness.data import Inputs, Outputs
from harness.dtypes import FORMATS
from harness.errors import Unavailable
from harness.spec import Case


def import_cudnn_layers() -> tuple[Any, Any]:
    """(CuDNNLSTM, CuDNNGRU) from tf_keras's v1 API (``tf.compat.v1.keras`` is Keras 3 once
    Keras 3 is installed, and Keras 3 has no CuDNN layers)."""
    try:
        from tf_keras.api._v1.keras.layers import CuDNNGRU, CuDNNLSTM
    except ImportError:
        try:
            from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
            from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM
        except ImportError as exc:
            raise Unavailable(f"tf_keras with CuDNNLSTM is not installed ({exc}); "
                              "pip install tf_keras") from None
    return CuDNNLSTM, CuDNNGRU


def short_name(variable: Any) -> str:
    """``kernel`` from ``cu_dnnlstm/kernel:0``."""
    return variable.name.split("/")[-1].split(":")[0]


def build_layer(case: Case, layer: int, d: int) -> Any:
    """The built, zero-initialised CuDNNLSTM / CuDNNGRU of one case layer and direction."""
    CuDNNLSTM, CuDNNGRU = import_cudnn_layers()
    cls = {"lstm": CuDNNLSTM, "gru": CuDNNGRU}[case.cell]
    kwargs = dict(units=case.hidden_size, return_sequences=True, return_state=True,
                  go_backwards=d == 1, dtype=case.dtype,
                  # every variable is overwritten; zeros avoids the orthogonal init's QR
                  kernel_initializer="zeros", recurrent_initializer="zeros",
                  bias_initializer="zeros")
    if case.cell_kind.has_cell_state:
        kwargs["unit_forget_bias"] = False
    rnn = cls(**kwargs)
    rnn.build((case.batch, case.seq_len, case.layer_input_size(layer)))
    return rnn


class KerasCuDNN(Adapter):
    name = "keras-cudnn"
    reruns = ((CPU, "keras"),)  # TF32 is off already: the same TF build on CPU
    title = "tf_keras CuDNNLSTM / CuDNNGRU (GPU)"
    framework = "keras"
    requires = ("tensorflow", "tf_keras")
    device = "gpu"
    layout_name = "keras-cudnn"
    capabilities = Capabilities(
        gru_reset_after=frozenset({True}),
        variable_lengths=False,
        gradients=True,
        reasons={
            **CUDNN_REASONS,
            "projection": "tf_keras CuDNNLSTM has no projection",
            "cell_clip": "tf_keras CuDNNLSTM has no cell clipping",
            "variable_lengths": "tf_keras CuDNNLSTM/CuDNNGRU accept no mask (\"Masking is not "
                                "supported for CuDNN RNNs\"): they run every step",
        },
    )

    def check_available(self) -> None:
        import_tf_gpu()
        import_cudnn_layers()

    def versions(self) -> dict[str, str]:
        import tf_keras

        return {**tf_versions(import_tf_gpu()), "tf_keras": tf_keras.__version__}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        import tensorflow as tf  # availability was checked by the runner

        np_dtype = FORMATS[case.dtype].numpy
        lstm = case.cell_kind.has_cell_state
        D = case.num_directions

        def tensor(a: np.ndarray) -> Any:
            return tf.cast(tf.constant(np.asarray(a, dtype=np.float64)), case.dtype)

        weights: dict[str, Any] = {}  # native name -> Keras variable
        tape = tf.GradientTape() if self.computes_gradients(case) else None
        with tf32_off(tf), tf.device("/GPU:0"):
            x = tensor(inputs.x)
            h0 = [tensor(h) for h in inputs.h0]
            c0 = [tensor(c) for c in inputs.c0] if lstm else []
            layers = {}
            for layer in range(case.num_layers):
                for d in case.directions:
                    rnn = layers[layer, d] = build_layer(case, layer, d)
                    names = [short_name(v) for v in rnn.weights]
                    assert names == list(KERAS_NAMES), names
                    rnn.set_weights([w.astype(np_dtype)
                                     for w in keras_weights(native, case, layer, d)])
                    weights |= {scoped(case, layer, d, n): v
                                for n, v in zip(names, rnn.weights, strict=True)}
            h_n, c_n, y_layers = [], [], []
            with tape if tape is not None else contextlib.nullcontext():
                if tape is not None:
                    tape.watch([x, *h0, *c0])  # the layer variables are watched as read
                layer_in = x
                for layer in range(case.num_layers):
                    outs = []
                    for k, d in enumerate(case.directions):
                        s = layer * D + k
                        state = [h0[s]] + ([c0[s]] if lstm else [])
                        y, *finals = layers[layer, d](layer_in, initial_state=state)
                        if d == 1:  # go_backwards returns y in reading order
                            y = tf.reverse(y, axis=[1])
                        outs.append(y)
                        h_n.append(finals[0])
                        if lstm:
                            c_n.append(finals[1])
                    layer_in = tf.concat(outs, axis=-1)
                    y_layers.append(layer_in)
            grads = None
            if tape is not None:
                grads = backward(tf, tape, case, inputs, (layer_in, h_n, c_n), (x, h0, c0),
                                 weights)
        return outputs_of(layer_in, h_n, c_n if lstm else None, y_layers, grads)
