"""PyTorch ``nn.LSTM`` / ``nn.GRU`` exported by ``torch.onnx.export(..., dynamo=False)`` (the
TorchScript-based exporter), run in ONNX Runtime on CPU: the shared code is
:class:`harness.adapters._torch_onnx.TorchOnnx`. The export call is this file's: the TorchScript
exporter takes the dynamic axes by input name and writes the graph to a byte stream."""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

from harness.adapters._torch_onnx import TorchOnnx


class TorchOnnxTorchScript(TorchOnnx):
    name = "torch-onnx-torchscript"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.onnx.export(dynamo=False) -> ONNX Runtime (CPU)"
    exporter = "torchscript"

    def export_graph(self, torch: ModuleType, wrapped: Any, args: tuple[Any, ...],
                     names: list[str]) -> Any:
        import onnx  # installed: check_available asked for it

        buf = io.BytesIO()
        axes = {"x": {0: "batch", 1: "steps"}, "h0": {1: "batch"}, "c0": {1: "batch"}}
        torch.onnx.export(wrapped, args, buf, dynamo=False, input_names=names,
                          dynamic_axes={k: axes[k] for k in names})
        return onnx.load_from_string(buf.getvalue())
