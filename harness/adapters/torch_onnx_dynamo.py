"""PyTorch ``nn.LSTM`` / ``nn.GRU`` exported by ``torch.onnx.export(..., dynamo=True)`` (the
``torch.export``-based exporter, onnxscript), run in ONNX Runtime on CPU: the shared code is
:class:`harness.adapters._torch_onnx.TorchOnnx`."""

from __future__ import annotations

from harness.adapters._torch_onnx import TorchOnnx, import_onnxscript


class TorchOnnxDynamo(TorchOnnx):
    name = "torch-onnx-dynamo"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.onnx.export(dynamo=True) -> ONNX Runtime (CPU)"
    exporter = "dynamo"

    def check_available(self) -> None:
        super().check_available()
        import_onnxscript()

    def versions(self) -> dict[str, str]:
        return super().versions() | {"onnxscript": import_onnxscript().__version__}
