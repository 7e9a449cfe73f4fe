"""tf_keras ``LSTM`` / ``GRU`` / ``Bidirectional`` converted by ``tf.lite.TFLiteConverter`` and run
in the LiteRT interpreter on CPU (layout ``keras``); the shared code is
:mod:`harness.adapters._litert`. Each pair's reason says which form the converter emitted.
"""

from __future__ import annotations

import numpy as np

from harness.adapters._keras import TF_KERAS_ACTIVATIONS as ACTIVATIONS
from harness.adapters._keras import import_tf_keras, layer_reasons
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


class LiteRTTfKeras(Adapter):
    name = "litert-tf-keras"
    title = "tf_keras LSTM/GRU -> TFLiteConverter -> LiteRT interpreter (CPU)"
    framework = "litert"
    requires = ("tensorflow", "tf_keras", "ai_edge_litert")
    layout_name = "keras"
    native_in_case_dtype = True
    saved_models = ("tflite",)  # the converted model the interpreter ran
    unroll = False  # tf_keras ``unroll=True``: the steps unrolled into the graph (tests)
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        reasons=layer_reasons("tf_keras") | {
            "dtypes": DTYPE_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        import_tf_keras()
        import_litert()

    def versions(self) -> dict[str, str]:
        tf, tf_keras = import_tf_keras()
        return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
                "ai_edge_litert": litert_version(), "converter": ROUTE,
                "unroll": str(self.unroll)}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, tf_keras = import_tf_keras()
        with tf.device("/CPU:0"):
            return run_litert(tf_keras, tf, case, native, inputs,
                              activation=ACTIVATIONS[case.recurrent_activation],
                              layer_kwargs={"unroll": self.unroll})
