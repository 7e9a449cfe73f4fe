"""tf_keras (the Keras 2 API) ``LSTM`` / ``GRU`` / ``Bidirectional`` on CPU (layout ``keras``).

The API that ``CuDNNLSTM`` users moved to; built and called eagerly, pinned to ``/CPU:0`` so
that a visible GPU does not switch tf_keras to its cuDNN path. Padded steps of a unidirectional
masked layer are zeroed by the executor (Keras CPU repeats the last valid output there).

Gradient cases: TensorFlow's own backward pass, a ``tf.GradientTape`` over the same calls
(:func:`harness.adapters._keras.backward`). The shared code is
:class:`harness.adapters._keras.KerasAdapter`.
"""

from __future__ import annotations

from harness.adapters._keras import KerasAdapter, import_tf_keras, layer_reasons
from harness.adapters.base import Capabilities
from harness.frameworks.keras import TF_KERAS_ACTIVATIONS


class Keras(KerasAdapter):
    name = "keras"
    title = "tf_keras LSTM/GRU (CPU)"
    requires = ("tensorflow", "tf_keras")
    import_keras = staticmethod(import_tf_keras)
    keras_dist = "tf_keras"
    activations = TF_KERAS_ACTIVATIONS
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        recurrent_activations=frozenset(TF_KERAS_ACTIVATIONS),
        gradients=True,
        reasons=layer_reasons("tf_keras"),
    )
