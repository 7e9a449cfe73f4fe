"""PyTorch ``nn.LSTM`` / ``nn.GRU`` on CUDA through cuDNN (layout ``torch``), TF32 off and on.

The executor is :class:`~harness.adapters._torch.TorchRNN` on ``cuda`` tensors (packed
sequences for variable lengths, ``proj_size`` for projection, autograd for gradient cases);
these adapters add the GPU availability check and pin cuDNN's float32 RNN math around the
call (forward and backward), restoring the previous setting afterwards:

- ``torch-cudnn``: TF32 off (``torch.backends.cudnn.rnn.fp32_precision = 'ieee'``);
- ``torch-cudnn-tf32``: TF32 allowed (``'tf32'``, PyTorch's default for cuDNN RNNs; docs/layouts.md,
Precision of float32 frameworks), float32 only, with its own default tolerance.

torch >= 2.9 refuses to mix the per-op ``fp32_precision`` API with the legacy
``torch.backends.cudnn.allow_tf32`` flag (RuntimeError on read), so the legacy flag is only
used where the new API does not exist.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from harness.adapters._torch import NN_REASONS, TorchRNN, import_torch
from harness.adapters.base import Capabilities
from harness.attribution import CPU, TF32_OFF
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.families.torch import set_cudnn_rnn_tf32
from harness.spec import Case, Tol

REASONS = {
    **NN_REASONS,
    "peepholes": "cuDNN LSTM has no peephole connections (PyTorch nn.LSTM neither)",
    "cell_clip": "PyTorch nn.LSTM exposes no cell clipping (cuDNN's cudnnRNNSetClip is not wired)",
}


@contextmanager
def cudnn_rnn_tf32(torch: Any, allow: bool) -> Iterator[None]:
    """Allow or forbid TF32 in cuDNN RNNs for the duration; the previous setting comes back
    (:func:`harness.families.torch.set_cudnn_rnn_tf32`, which a reproducer runs too)."""
    restore = set_cudnn_rnn_tf32(torch, allow)
    try:
        yield
    finally:
        restore()


def check_cuda_cudnn(torch: Any) -> None:
    """Raise Unavailable unless PyTorch sees a CUDA device and cuDNN is usable."""
    if not torch.cuda.is_available():
        build = ("a CPU-only build" if torch.version.cuda is None
                 else f"built for CUDA {torch.version.cuda}")
        raise Unavailable(f"no CUDA device visible to PyTorch (torch {torch.__version__}, {build})")
    if not torch.backends.cudnn.is_available():
        raise Unavailable("PyTorch sees a CUDA device but cuDNN is not available")
    if not torch.backends.cudnn.enabled:
        raise Unavailable("cuDNN is disabled (torch.backends.cudnn.enabled is False)")


class TorchCuDNN(TorchRNN):
    name = "torch-cudnn"
    reruns = ((CPU, "torch-cpu"),)  # a divergence here: cuDNN's arithmetic or ours?
    title = "PyTorch nn.LSTM/nn.GRU on CUDA (cuDNN, TF32 off)"
    device = "gpu"
    torch_device = "cuda"
    allow_tf32 = False
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        gradients=True,  # the backward pass of TorchRNN._run, on cuda tensors
        reasons=REASONS,
    )

    def check_available(self) -> None:
        check_cuda_cudnn(import_torch())

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "cudnn": str(torch.backends.cudnn.version()),
            "gpu": torch.cuda.get_device_name(0),
            "cudnn_rnn_tf32": "allowed" if self.allow_tf32 else "off",
        }

    def run_settings(self) -> dict:
        return {"cudnn_rnn_tf32": self.allow_tf32}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        torch = import_torch()
        with cudnn_rnn_tf32(torch, self.allow_tf32):
            return super()._run(case, native, inputs)


class TorchCuDNNTF32(TorchCuDNN):
    name = "torch-cudnn-tf32"
    reruns = ((TF32_OFF, "torch-cudnn"), (CPU, "torch-cpu"))
    title = "PyTorch nn.LSTM/nn.GRU on CUDA (cuDNN, TF32 allowed: PyTorch's default)"
    allow_tf32 = True
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        dtypes=frozenset({"float32"}),
        gradients=True,
        reasons={**REASONS,
                 "dtypes": "TF32 only changes float32 math; other dtypes run in torch-cudnn"},
    )
    # TF32 rounds matmul operands to 10 mantissa bits: emulated errors 8e-4 to 1e-3 at
    # T=20..100, H=64..256, growing with H and T (docs/layouts.md, Precision of float32 frameworks)
    tolerances = {"float32": Tol(atol=5e-3)}
