"""tf_keras ``LSTM`` / ``GRU`` / ``Bidirectional`` converted by ``tf.lite.TFLiteConverter`` and run
in the LiteRT interpreter on CPU (layout ``keras``); the shared code is
:mod:`harness.adapters._litert`. Each pair's reason says which form the converter emitted.
"""

from __future__ import annotations

from harness.adapters._keras import import_tf_keras, layer_reasons
from harness.adapters._litert import DTYPE_REASON, LiteRTAdapter
from harness.adapters.base import Capabilities
from harness.frameworks.keras import TF_KERAS_ACTIVATIONS


class LiteRTTfKeras(LiteRTAdapter):
    name = "litert-tf-keras"
    title = "tf_keras LSTM/GRU -> TFLiteConverter -> LiteRT interpreter (CPU)"
    requires = ("tensorflow", "tf_keras", "ai_edge_litert")
    import_keras = staticmethod(import_tf_keras)
    keras_dist = "tf_keras"
    activations = TF_KERAS_ACTIVATIONS
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset(TF_KERAS_ACTIVATIONS),
        reasons=layer_reasons("tf_keras") | {
            "dtypes": DTYPE_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )
