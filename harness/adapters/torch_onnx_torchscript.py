"""PyTorch ``nn.LSTM`` / ``nn.GRU`` exported by ``torch.onnx.export(..., dynamo=False)`` (the
TorchScript-based exporter), run in ONNX Runtime on CPU: the shared code is
:class:`harness.adapters._torch_onnx.TorchOnnx`."""

from __future__ import annotations

from harness.adapters._torch_onnx import TorchOnnx


class TorchOnnxTorchScript(TorchOnnx):
    name = "torch-onnx-torchscript"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.onnx.export(dynamo=False) -> ONNX Runtime (CPU)"
    exporter = "torchscript"
