"""PyTorch ``nn.LSTM`` / ``nn.GRU`` on CPU (layout ``torch``), packed sequences for lengths; the
executor, autograd for gradient cases included, is :class:`harness.adapters._torch.TorchRNN`.
"""

from __future__ import annotations

from harness.adapters._torch import NN_REASONS, TorchRNN, import_torch
from harness.adapters.base import Capabilities


class TorchCPU(TorchRNN):
    name = "torch-cpu"
    title = "PyTorch nn.LSTM/nn.GRU (CPU)"
    capabilities = Capabilities(
        projection=True,
        gru_reset_after=frozenset({True}),
        gradients=True,
        reasons=NN_REASONS,
    )

    def check_available(self) -> None:
        import_torch()

    def versions(self) -> dict[str, str]:
        torch = import_torch()
        return {"torch": torch.__version__, "torch_threads": str(torch.get_num_threads())}
