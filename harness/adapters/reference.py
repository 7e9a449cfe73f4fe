"""The float64 reference and the noise-floor reference (the same code in the case dtype)."""

from __future__ import annotations

import numpy as np

from harness.adapters._reference import EVERYTHING, forward_backward
from harness.adapters.base import Adapter
from harness.data import Inputs, Outputs
from harness.dtypes import DTYPES
from harness.params import Canonical
from harness.spec import Case, Tol

# Beside a float64 baseline computed on the GPU (a GPU run: harness/prepare.py) the NumPy
# reference is an adapter judged against it, on the cases it computes in about a second or less
# on a core: at most this many multiply-adds in the products (seed 000's model at B=32, T=1000
# has 3.5e11: 20 s on 16 cores)
BESIDE_A_GPU_BASELINE_MAX_MACS = 10**10


def multiply_adds(case: Case) -> int:
    """The multiply-adds of the forward's products: input projections and recurrent products
    of every layer, direction and step (the projection's left out)."""
    per_step = sum(case.layer_input_size(layer) + case.out_size
                   for layer in range(case.num_layers))
    return (case.batch * case.seq_len * case.num_directions * len(case.gates)
            * case.hidden_size * per_step)


class Reference(Adapter):
    name = "reference"
    title = "NumPy float64 reference"
    framework = "reference"
    capabilities = EVERYTHING
    baseline = True
    # judged only beside a baseline on the GPU: the same code, float64 whatever the case dtype
    tolerances = {dtype: Tol(atol=1e-12, rtol=1e-12) for dtype in DTYPES}

    def versions(self) -> dict[str, str]:
        return {"numpy": np.__version__}

    def beside_a_gpu_baseline(self, case: Case) -> str | None:
        """Why the NumPy reference does not run beside a baseline computed on the GPU (a
        case too large for it), or None: it runs and is judged against that baseline."""
        macs = multiply_adds(case)
        if macs <= BESIDE_A_GPU_BASELINE_MAX_MACS:
            return None
        return (f"the NumPy reference runs beside the GPU baseline on small cases only "
                f"({macs:.2g} multiply-adds, more than {BESIDE_A_GPU_BASELINE_MAX_MACS:.0e})")

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
    is_the_noise_floor = True
    tolerances = {}  # the case dtype's, not the float64 reference's 1e-12

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        return forward_backward(case, Canonical(native), inputs, case.dtype)
