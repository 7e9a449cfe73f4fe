"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` on the TensorFlow backend, CPU (layout ``keras``).

Keras 3 picks its backend once, at import: the adapter sets ``KERAS_BACKEND=tensorflow`` when
nothing chose one, and is unavailable when Keras was already loaded with another backend.
``use_cudnn=False`` and ``/CPU:0`` keep the generic CPU loop even when a GPU is visible (the TF
backend otherwise takes cuDNN whenever a GPU exists). Padded steps of a unidirectional masked
layer are zeroed by the executor (Keras CPU repeats the last valid output there).

Gradient cases: TensorFlow's own backward pass, a ``tf.GradientTape`` over the same calls
(:func:`harness.adapters._keras.backward`).
"""

from __future__ import annotations

import numpy as np

from harness.adapters._keras import KERAS3_ACTIVATIONS as ACTIVATIONS
from harness.adapters._keras import import_keras3, layer_reasons, run_keras
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case


class Keras3(Adapter):
    name = "keras3"
    title = "Keras 3 LSTM/GRU, TensorFlow backend (CPU)"
    framework = "keras"
    requires = ("tensorflow", "keras")
    layout_name = "keras"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        gradients=True,
        reasons=layer_reasons("Keras 3"),
    )

    def check_available(self) -> None:
        import_keras3()

    def versions(self) -> dict[str, str]:
        tf, keras = import_keras3()
        return {"tensorflow": tf.__version__, "keras": keras.__version__}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, keras = import_keras3()
        with tf.device("/CPU:0"):
            return run_keras(keras, tf, case, native, inputs,
                             activation=ACTIVATIONS[case.recurrent_activation],
                             gradients=self.computes_gradients(case),
                             layer_kwargs={"use_cudnn": False})
