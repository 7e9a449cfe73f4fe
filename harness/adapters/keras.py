"""tf_keras (the Keras 2 API) ``LSTM`` / ``GRU`` / ``Bidirectional`` on CPU (layout ``keras``).

The API that ``CuDNNLSTM`` users moved to; built and called eagerly, pinned to ``/CPU:0`` so
that a visible GPU does not switch tf_keras to its cuDNN path. Padded steps of a unidirectional
masked layer are zeroed by the executor (Keras CPU repeats the last valid output there).

Gradient cases: TensorFlow's own backward pass, a ``tf.GradientTape`` over the same calls
(:func:`harness.adapters._keras.backward`).
"""

from __future__ import annotations

import numpy as np

from harness.adapters._keras import TF_KERAS_ACTIVATIONS as ACTIVATIONS
from harness.adapters._keras import import_tf_keras, layer_reasons, run_keras
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case


class Keras(Adapter):
    name = "keras"
    title = "tf_keras LSTM/GRU (CPU)"
    framework = "keras"
    requires = ("tensorflow", "tf_keras")
    layout_name = "keras"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        gradients=True,
        reasons=layer_reasons("tf_keras"),
    )

    def check_available(self) -> None:
        import_tf_keras()

    def versions(self) -> dict[str, str]:
        tf, tf_keras = import_tf_keras()
        return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, tf_keras = import_tf_keras()
        with tf.device("/CPU:0"):
            return run_keras(tf_keras, tf, case, native, inputs,
                             activation=ACTIVATIONS[case.recurrent_activation],
                             gradients=self.computes_gradients(case))
