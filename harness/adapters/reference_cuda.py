"""The float64 reference on the GPU: ``harness.reference`` run on CuPy arrays or, where CuPy is
not installed, on torch CUDA tensors.

The reference code is array-namespace generic (``harness/reference/functions.py``), so this
is the same code as the NumPy reference, not a second implementation: it checks the GPU
runner's own arithmetic (CUDA's exp/tanh, cuBLAS's summation order) and gives GPU runs a
float64 baseline on the device. It must agree with the NumPy reference to 1e-12 whatever the
case dtype (its inputs are the case's, already rounded to the case dtype; it computes in
float64), hence its own tolerance.

The backend is CuPy when it is installed (the ``gpu`` extra), else torch with CUDA (a GPU
runner that has the torch CUDA build only); ``framework`` names the one it would use, so the
pytest marker follows what is installed.

With CuPy, the cases the fused step kernels cover (``harness/reference/fast_cuda.py``: LSTM and
GRU with the sigmoid, no peepholes, projection, clips, forget bias or input_forget) run there:
per step one cuBLAS product and one fused kernel instead of the generic code's ~20 small
kernels, the same equations in the same order (checked against the NumPy reference to 1e-12,
``tests/reference/test_fast_cuda.py``). Every other case, and every case on the torch backend, runs
the generic reference on the device; its pair says so (:meth:`ReferenceCUDA.route_note`).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.adapters._reference import EVERYTHING, forward_backward
from harness.adapters.base import Adapter
from harness.data import Inputs, Outputs
from harness.dtypes import DTYPES
from harness.errors import Unavailable
from harness.params import Canonical
from harness.spec import Case, Tol

# Each direction's step loop captured as a CUDA graph once and replayed for every layer: the
# capture costs about one eager pass of a layer, so it pays from two layers on
# (benchmarks/gpu_reference_routes.py)
GRAPHS_FROM_LAYERS = 2


def import_cupy() -> Any:
    """CuPy with at least one CUDA device, else Unavailable."""
    try:
        import cupy
    except ImportError as exc:
        raise Unavailable(f"cupy is not installed ({exc}); pip install cupy-cuda13x (CUDA 13) "
                          "or cupy-cuda12x (CUDA 12)") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        raise Unavailable(f"no CUDA device visible to CuPy ({type(exc).__name__}: {exc})") from None
    if count == 0:
        raise Unavailable("no CUDA device visible to CuPy")
    return cupy


def import_torch_cuda() -> Any:
    """torch with a CUDA device, else Unavailable."""
    try:
        import torch
    except ImportError as exc:
        raise Unavailable(f"torch is not installed ({exc})") from None
    if not torch.cuda.is_available():
        build = ("a CPU-only build" if torch.version.cuda is None
                 else f"built for CUDA {torch.version.cuda}")
        raise Unavailable(f"no CUDA device visible to PyTorch (torch {torch.__version__}, {build})")
    return torch


@dataclass(frozen=True)
class Backend:
    """Moving arrays to the device and back, and what to report about it."""

    framework: str
    to_device: Any  # float64 NumPy array -> device array
    to_host: Any  # device array -> NumPy array
    versions: Any  # () -> dict[str, str]


def cupy_backend() -> Backend:
    cupy = import_cupy()

    def versions() -> dict[str, str]:
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        return {"cupy": cupy.__version__,
                "cuda_runtime": str(cupy.cuda.runtime.runtimeGetVersion()),
                "gpu": name.decode() if isinstance(name, bytes) else str(name)}

    return Backend("cupy", cupy.asarray, cupy.asnumpy, versions)


def torch_backend() -> Backend:
    torch = import_torch_cuda()

    def versions() -> dict[str, str]:
        return {"torch": torch.__version__, "cuda_runtime": str(torch.version.cuda),
                "gpu": torch.cuda.get_device_name(0)}

    return Backend("torch", lambda a: torch.from_numpy(a).to("cuda"),
                   lambda a: a.detach().cpu().numpy(), versions)


@functools.cache
def fast_device() -> Any:
    """The fused steps' device (CuPy, the kernels compiled once per process)."""
    from harness.reference import cuda_device

    return cuda_device.CupyDevice()


def fast_path_gaps(framework: str, case: Case) -> list[str]:
    """Why the fused steps do not run ``case`` on backend ``framework`` (empty: they do)."""
    if framework != "cupy":
        return [f"the fused steps need CuPy, the backend is {framework}"]
    from harness.reference import fast_cuda  # imported when a GPU case runs

    return fast_cuda.unsupported(case)


def backend() -> Backend:
    """CuPy where installed, else torch with CUDA; Unavailable naming both reasons."""
    try:
        return cupy_backend()
    except Unavailable as cupy_reason:
        try:
            return torch_backend()
        except Unavailable as torch_reason:
            raise Unavailable(f"{cupy_reason}; and {torch_reason}") from None


class ReferenceCUDA(Adapter):
    name = "reference-cuda"
    title = "float64 reference on the GPU (same code on CuPy arrays or torch CUDA tensors)"
    device = "gpu"
    capabilities = EVERYTHING
    tolerances = {dtype: Tol(atol=1e-12, rtol=1e-12) for dtype in DTYPES}

    @property
    def framework(self) -> str:  # type: ignore[override]
        """``cupy`` where it is installed, else ``torch`` where it is (the pytest marker)."""
        if importlib.util.find_spec("cupy") is None and importlib.util.find_spec("torch"):
            return "torch"
        return "cupy"

    def check_available(self) -> None:
        backend()

    def versions(self) -> dict[str, str]:
        b = backend()
        route = ("fused CUDA steps (harness/reference/fast_cuda.py) where they cover the case, "
                 "else the generic reference" if b.framework == "cupy"
                 else "the generic reference (no CuPy for the fused steps)")
        return b.versions() | {"route": route}

    def route_note(self, case: Case) -> str | None:
        """Said on the pair when the case runs the generic reference on the device."""
        gaps = fast_path_gaps(backend().framework, case)
        return f"generic reference on the GPU ({', '.join(gaps)})" if gaps else None

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        b = backend()

        def dev(a: np.ndarray) -> Any:
            return b.to_device(np.array(a, dtype=np.float64))

        canonical = Canonical({k: dev(v) for k, v in native.items()})
        on_gpu = inputs.mapped(dev)
        if fast_path_gaps(b.framework, case):
            out = forward_backward(case, canonical, on_gpu, "float64")
        else:
            from harness.reference import fast_cuda

            out = fast_cuda.run(fast_device(), case, canonical, on_gpu,
                                graphs=case.num_layers >= GRAPHS_FROM_LAYERS)
        return out.mapped(b.to_host)
