"""Registry of adapters: one module per adapter, one line each here.

Importing this module imports no framework; each adapter imports its own when it runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.adapters.base import Adapter, AdapterFault, Capabilities
from harness.adapters.executorch import ExecuTorch, ExecuTorchPortable
from harness.adapters.flax_linen import FlaxLinen
from harness.adapters.flax_linen_optimized import FlaxLinenOptimized
from harness.adapters.flax_nnx import FlaxNnx
from harness.adapters.keras import Keras
from harness.adapters.keras3 import Keras3
from harness.adapters.keras3_jax import Keras3Jax
from harness.adapters.keras3_openvino import Keras3OpenVINO
from harness.adapters.keras3_torch import Keras3Torch
from harness.adapters.keras_cudnn import KerasCuDNN
from harness.adapters.litert_fused import LiteRTFused
from harness.adapters.litert_keras3 import LiteRTKeras3
from harness.adapters.litert_quantized import (
    LiteRTDynamic,
    LiteRTInt8,
    LiteRTInt8Ref,
    LiteRTInt16x8,
)
from harness.adapters.litert_shipped import LiteRTShipped
from harness.adapters.litert_tf_keras import LiteRTTfKeras
from harness.adapters.litert_torch import LiteRTTorch
from harness.adapters.mlx import MLX
from harness.adapters.onnx_reference import OnnxReference
from harness.adapters.onnxruntime import OnnxRuntime
from harness.adapters.onnxruntime_dynamic import (
    OnnxRuntimeDynamicInt8,
    OnnxRuntimeDynamicInt8FullRange,
)
from harness.adapters.openvino import OpenVINO, OpenVINOBatchMajor, OpenVINONNCFInt8
from harness.adapters.openvino_shipped import OpenVINOShipped
from harness.adapters.reference import NoiseFloor, Reference
from harness.adapters.reference_cuda import ReferenceCUDA
from harness.adapters.tf_block import TFBlockLSTM, TFBlockLSTMV2
from harness.adapters.tf_cudnn import TFCuDNN
from harness.adapters.tf_legacy import TFLegacy
from harness.adapters.torch_compile import TorchCompile
from harness.adapters.torch_cpu import TorchCPU
from harness.adapters.torch_cudnn import TorchCuDNN, TorchCuDNNTF32
from harness.adapters.torch_dynamic import TorchDynamicInt8
from harness.adapters.torch_onnx_dynamo import TorchOnnxDynamo
from harness.adapters.torch_onnx_torchscript import TorchOnnxTorchScript
from harness.errors import HarnessError
from harness.spec import Case

ADAPTERS: dict[str, Adapter] = {
    adapter.name: adapter
    for adapter in (
        Reference(),
        NoiseFloor(),
        TorchCPU(),
        TorchCompile(),
        TorchDynamicInt8(),
        OnnxRuntime(),
        OnnxRuntimeDynamicInt8(),
        OnnxRuntimeDynamicInt8FullRange(),
        OpenVINO(), OpenVINOBatchMajor(), OpenVINONNCFInt8(),
        OnnxReference(),
        TorchOnnxDynamo(),
        TorchOnnxTorchScript(),
        ExecuTorch(), ExecuTorchPortable(),
        TFBlockLSTM(), TFBlockLSTMV2(),
        TFLegacy(),
        Keras(), Keras3(), Keras3Jax(), Keras3Torch(), Keras3OpenVINO(),
        LiteRTTfKeras(), LiteRTKeras3(), LiteRTFused(),
        LiteRTInt8(), LiteRTInt8Ref(), LiteRTDynamic(), LiteRTInt16x8(),
        LiteRTTorch(),
        LiteRTShipped(), OpenVINOShipped(),
        FlaxLinen(), FlaxLinenOptimized(), FlaxNnx(),
        MLX(),
        TorchCuDNN(), TorchCuDNNTF32(), TFCuDNN(), KerasCuDNN(), ReferenceCUDA(),
    )
}


def get_adapter(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise HarnessError(f"unknown adapter {name!r}; known: {', '.join(ADAPTERS)}") from None


# the selections a name list may hold beside adapter names: ``all`` is the default selection
# (every adapter but the named-only ones); ``every`` adds the named-only ones
ALL = "all"
EVERY = "every"
SELECTIONS = (ALL, EVERY)


def select(names: list[str] | None, device: str = "all",
           cases: Iterable[Case] = ()) -> list[Adapter]:
    """Adapters named, filtered by device (cpu | gpu | all). No names, or ``all``: the default
    selection, every adapter but those left out for cost (:attr:`Adapter.named_only`), which
    come in only where named explicitly: in ``names`` beside ``all``, or in a case's
    ``adapters:`` list (``cases``; :func:`harness.pairs.selected_by_case` then runs it on
    those cases only). ``every``: every adapter, the named-only ones included."""
    if names and EVERY in names:
        chosen = list(ADAPTERS.values())
    elif not names or ALL in names:
        named = set(names or ()) | {n for c in cases for n in c.adapters} | {
            a.name for c in cases for a in ADAPTERS.values() if a.asked_for(c)}
        chosen = [a for a in ADAPTERS.values() if a.named_only is None or a.name in named]
        chosen += [get_adapter(n) for n in names or () if n != ALL
                   and get_adapter(n) not in chosen]
    else:
        chosen = [get_adapter(n) for n in names]
    return [a for a in chosen if device == "all" or a.device == device or a.baseline]


def named_explicitly(names: Iterable[str] | None) -> frozenset[str]:
    """The adapters ``names`` name explicitly, which a named-only adapter needs to run on every
    case (:func:`harness.pairs.selected_by_case`): ``all`` names none, ``every`` names each."""
    names = set(names or ())
    if EVERY in names:
        return frozenset(ADAPTERS)
    return frozenset(names - {ALL})


def named_only_adapters() -> dict[str, str]:
    """The adapters left out of the default selection: name -> why (the one list the docs'
    lists of named-only adapters are checked against)."""
    return {a.name: a.named_only for a in ADAPTERS.values() if a.named_only is not None}


def left_out(chosen: Iterable[Adapter], device: str = "all") -> dict[str, str]:
    """The named-only adapters of ``device`` not in ``chosen``: name -> why they are left out
    of the default selection (the report's "run when named: ...")."""
    names = {a.name for a in chosen}
    return {a.name: a.named_only for a in ADAPTERS.values()
            if a.named_only is not None and a.name not in names
            and (device == "all" or a.device == device)}


__all__ = ["ADAPTERS", "ALL", "EVERY", "SELECTIONS", "Adapter", "AdapterFault", "Capabilities",
           "get_adapter", "left_out", "named_explicitly", "named_only_adapters", "select"]
