"""``litert-fused``: a tf_keras LSTM stack as it is deployed (the last layer's ``y`` its only
output), converted by ``TFLiteConverter.from_keras_model`` to the fused
``UNIDIRECTIONAL_SEQUENCE_LSTM`` kernel and run in the LiteRT interpreter on CPU: the float
kernel that runs on phones (:mod:`harness.adapters._litert_deployed`). Each pair's reason names
the converted ops; a model converted to anything but the fused kernel (a ``WHILE`` loop) is an
error row naming its ops, never a pass. ``h_n`` is compared where ``y`` determines it (one
layer), ``c_n`` never: the pair's reason says so.
"""

from __future__ import annotations

import numpy as np

from harness.adapters._keras import layer_reasons
from harness.adapters._litert import DTYPE_REASON, litert_version
from harness.adapters._litert_deployed import (
    ROUTE,
    DeployedTfKeras,
    ops_note,
    require_fused,
    run_deployed,
)
from harness.adapters.base import Capabilities
from harness.data import Inputs, Outputs
from harness.frameworks.litert import import_litert
from harness.spec import Case

NO_FUSED_GRU = "TFLite has no fused GRU op"
# measured (TensorFlow 2.21): a tf_keras LSTM called with a mask converts to RESHAPE,
# TRANSPOSE, TRANSPOSE, WHILE, TRANSPOSE
MASK_REASON = ("a deployed fused model has no lengths: a tf_keras LSTM with a mask converts to "
               "a WHILE loop, not UNIDIRECTIONAL_SEQUENCE_LSTM")
# the op computes its gates with a sigmoid (its options carry only the cell/output activation)
GATES_REASON = "UNIDIRECTIONAL_SEQUENCE_LSTM computes its gates with the sigmoid only"
H_N_FROM_Y = "; h_n read from y (each direction's last step)"


class LiteRTFused(DeployedTfKeras):
    name = "litert-fused"
    title = "tf_keras LSTM (y only) -> from_keras_model -> fused LiteRT kernel (CPU)"
    named_only = "a conversion costs seconds a model"
    capabilities = Capabilities(
        cells=frozenset({"lstm"}),
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        recurrent_activations=frozenset({"sigmoid"}),
        variable_lengths=False,
        reasons=layer_reasons("tf_keras") | {
            "cells": NO_FUSED_GRU,
            "dtypes": DTYPE_REASON,
            "variable_lengths": MASK_REASON,
            "recurrent_activations": GATES_REASON,
            "gradients": "a converted LiteRT model is inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        super().check_available()
        import_litert()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "ai_edge_litert": litert_version(), "converter": ROUTE}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out, ops = run_deployed(case, native, inputs,
                                activation=self.activations[case.recurrent_activation])
        require_fused(ops)
        out.note = ops_note(ops) + (H_N_FROM_Y if out.h_n is not None else "")
        return out
