"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` (TensorFlow backend) converted by
``tf.lite.TFLiteConverter`` and run in the LiteRT interpreter on CPU (layout ``keras``); the
shared code is :mod:`harness.adapters._litert`. Each pair's reason says which form the
converter emitted: a ``WHILE`` loop, never the fused LSTM kernel (tensorflow/tensorflow#73254,
google-ai-edge/LiteRT#41, tensorflow/tensorflow#126061).
"""

from __future__ import annotations

from harness.adapters._keras import import_keras3, layer_reasons
from harness.adapters._litert import DTYPE_REASON, LiteRTAdapter
from harness.adapters.base import Capabilities
from harness.frameworks.keras import KERAS3_ACTIVATIONS


class LiteRTKeras3(LiteRTAdapter):
    name = "litert-keras3"
    named_only = ("a conversion per case (about 0.35 s) to the same WHILE-loop form "
                  "litert-tf-keras runs by default")
    title = "Keras 3 LSTM/GRU (TF backend) -> TFLiteConverter -> LiteRT interpreter (CPU)"
    requires = ("tensorflow", "keras", "ai_edge_litert")
    import_keras = staticmethod(import_keras3)
    keras_dist = "keras"
    activations = KERAS3_ACTIVATIONS
    layer_kwargs = {"use_cudnn": False}  # the generic loop even where a GPU is visible
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset(KERAS3_ACTIVATIONS),
        reasons=layer_reasons("Keras 3") | {
            "dtypes": DTYPE_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )
