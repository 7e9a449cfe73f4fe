"""Keras 3 backend adapters with a fault planted in what they hand Keras, in a module of their
own: ``keras3-torch`` and ``keras3-openvino`` run in a worker process of their own, which
imports an adapter by module name, so a test's monkeypatch in its own process never reaches
them. Each swaps the first two gate blocks (columns) of a one-layer stack's ``kernel`` before
the real ``_run``, so the swapped weights are what Keras runs and what the run records."""

from __future__ import annotations

import numpy as np

from harness.adapters.keras3_openvino import Keras3OpenVINO
from harness.adapters.keras3_torch import Keras3Torch
from harness.data import Inputs, Outputs
from harness.spec import Case


def swapped_kernel(native: dict[str, np.ndarray], hidden: int) -> dict[str, np.ndarray]:
    native, w = dict(native), native["kernel"]
    native["kernel"] = np.concatenate([w[:, hidden:2 * hidden], w[:, :hidden],
                                       w[:, 2 * hidden:]], axis=1)
    return native


class SwappedKeras3Torch(Keras3Torch):
    name = "keras3-torch-swapped"

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        return super()._run(case, swapped_kernel(native, case.hidden_size), inputs)


class SwappedKeras3OpenVINO(Keras3OpenVINO):
    name = "keras3-openvino-swapped"

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        return super()._run(case, swapped_kernel(native, case.hidden_size), inputs)


SWAPPED = {"keras3-torch": SwappedKeras3Torch, "keras3-openvino": SwappedKeras3OpenVINO}
