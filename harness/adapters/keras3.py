"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` on the TensorFlow backend, CPU (layout ``keras``).

Keras 3 picks its backend once, at import: the adapter sets ``KERAS_BACKEND=tensorflow`` when
nothing chose one, and is unavailable when Keras was already loaded with another backend.
``use_cudnn=False`` and ``/CPU:0`` keep the generic CPU loop even when a GPU is visible (the TF
backend otherwise takes cuDNN whenever a GPU exists). Padded steps of a unidirectional masked
layer are zeroed by the executor (Keras CPU repeats the last valid output there).

Gradient cases: TensorFlow's own backward pass, a ``tf.GradientTape`` over the same calls
(:func:`harness.adapters._keras.backward`). The shared code is
:class:`harness.adapters._keras.KerasAdapter`.
"""

from __future__ import annotations

from harness.adapters._keras import KerasAdapter, import_keras3, layer_reasons
from harness.adapters.base import Capabilities
from harness.frameworks.keras import KERAS3_ACTIVATIONS


class Keras3(KerasAdapter):
    name = "keras3"
    title = "Keras 3 LSTM/GRU, TensorFlow backend (CPU)"
    requires = ("tensorflow", "keras")
    import_keras = staticmethod(import_keras3)
    keras_dist = "keras"
    activations = KERAS3_ACTIVATIONS
    layer_kwargs = {"use_cudnn": False}  # the generic loop even where a GPU is visible
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        recurrent_activations=frozenset(KERAS3_ACTIVATIONS),
        gradients=True,
        reasons=layer_reasons("Keras 3"),
    )
