"""PyTorch ``nn.LSTM`` / ``nn.GRU`` exported by ``torch.onnx.export(..., dynamo=True)`` (the
``torch.export``-based exporter, onnxscript), run in ONNX Runtime on CPU: the shared code is
:class:`harness.adapters._torch_onnx.TorchOnnx`. The export call is this file's: the dynamo
exporter takes the dynamic axes as ``torch.export.Dim`` objects, returns an ``ONNXProgram``, and
needs the dispatch caches cleared first (:func:`forget_previous_exports`)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from harness.adapters._torch_onnx import TorchOnnx
from harness.errors import Unavailable


def import_onnxscript():
    try:
        import onnxscript
    except ImportError as exc:
        raise Unavailable(f"onnxscript is not installed ({exc}); the dynamo exporter needs it: "
                          f"pip install onnxscript") from None
    return onnxscript


def forget_previous_exports(torch) -> None:
    """Clear the dispatch caches of aten.lstm / aten.gru before a dynamo export. With torch
    2.13 an export of an nn.LSTM (nn.GRU) right after another export of the same op, with no
    export of the other op between, gets the time axis frozen at the example's length though it
    was declared dynamic (the symptom of pytorch#191855): the first export left the op's
    dispatch cache pointing past the decomposition that keeps the axis symbolic. Cleared, every
    case is exported as a process's first export of the op is, so its verdict does not depend on
    the cases run before it; tests/adapters/test_adapter_torch_onnx.py exports twice without this
    and checks the frozen axis is reported."""
    for name in ("lstm", "gru"):
        packet = getattr(torch.ops.aten, name)
        for overload in ("input", "data"):
            cache = getattr(getattr(packet, overload, None), "_dispatch_cache", None)
            if cache is not None:
                cache.clear()


class TorchOnnxDynamo(TorchOnnx):
    name = "torch-onnx-dynamo"
    title = "PyTorch nn.LSTM/nn.GRU -> torch.onnx.export(dynamo=True) -> ONNX Runtime (CPU)"
    exporter = "dynamo"
    exporter_modules = {"onnxscript": import_onnxscript}
    forget_previous = True  # forget_previous_exports before each export (tests: False)
    named_only = ("exports each case with torch.export (dynamo): about 1 s a case, a fifth of "
                  "a CPU run's time on 2 cores")

    def export_graph(self, torch: ModuleType, wrapped: Any, args: tuple[Any, ...],
                     names: list[str]) -> Any:
        if self.forget_previous:
            forget_previous_exports(torch)
        batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
        shapes = ({0: batch, 1: steps},) + ({1: batch},) * (len(args) - 1)
        program = torch.onnx.export(wrapped, args, dynamo=True, verbose=False,
                                    input_names=names, dynamic_shapes=shapes)
        return program.model_proto
