"""The float64 reference and the noise-floor reference (the same code in the case dtype)."""

from __future__ import annotations

import numpy as np

from harness.adapters._reference import EVERYTHING, forward_backward
from harness.adapters.base import Adapter
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.spec import Case


class Reference(Adapter):
    name = "reference"
    title = "NumPy float64 reference"
    framework = "reference"
    capabilities = EVERYTHING
    baseline = True

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        return forward_backward(case, Canonical(native), inputs, "float64")


class NoiseFloor(Reference):
    """The reference in the case dtype's arithmetic (element-wise results rounded to it,
    products accumulated as frameworks do: docs/equations.md): the error a correct
    implementation in that dtype can be expected to show. Other adapters' errors are reported
    as a ratio of it, and a row within 8x of it passes."""

    name = "noise-floor"
    title = "NumPy reference in the case dtype's arithmetic (noise floor)"
    baseline = False

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        return forward_backward(case, Canonical(native), inputs, case.dtype)
