"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` (TensorFlow backend) converted by
``tf.lite.TFLiteConverter`` and run in the LiteRT interpreter on CPU (layout ``keras``); the
shared code is :mod:`harness.adapters._litert`. Each pair's reason says which form the
converter emitted: a ``WHILE`` loop, never the fused LSTM kernel (tensorflow/tensorflow#73254,
google-ai-edge/LiteRT#41, tensorflow/tensorflow#126061).
"""

from __future__ import annotations

import numpy as np

from harness.adapters._keras import KERAS3_ACTIVATIONS as ACTIVATIONS
from harness.adapters._keras import import_keras3, layer_reasons
from harness.adapters._litert import (
    DTYPE_REASON,
    ROUTE,
    import_litert,
    litert_version,
    run_litert,
)
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case


class LiteRTKeras3(Adapter):
    name = "litert-keras3"
    title = "Keras 3 LSTM/GRU (TF backend) -> TFLiteConverter -> LiteRT interpreter (CPU)"
    framework = "litert"
    requires = ("tensorflow", "keras", "ai_edge_litert")
    layout_name = "keras"
    native_in_case_dtype = True
    saved_models = ("tflite",)  # the converted model the interpreter ran
    unroll = False
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        reasons=layer_reasons("Keras 3") | {
            "dtypes": DTYPE_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        import_keras3()
        import_litert()

    def versions(self) -> dict[str, str]:
        tf, keras = import_keras3()
        return {"tensorflow": tf.__version__, "keras": keras.__version__,
                "ai_edge_litert": litert_version(), "converter": ROUTE,
                "unroll": str(self.unroll)}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, keras = import_keras3()
        with tf.device("/CPU:0"):
            return run_litert(keras, tf, case, native, inputs,
                              activation=ACTIVATIONS[case.recurrent_activation],
                              layer_kwargs={"use_cudnn": False, "unroll": self.unroll})
