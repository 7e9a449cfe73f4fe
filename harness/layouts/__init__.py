"""Registry of layouts: one module per framework layout, one line each here."""

from __future__ import annotations

from harness.errors import HarnessError
from harness.layouts.base import Layout
from harness.layouts.canonical import CANONICAL
from harness.layouts.flax import FLAX, FLAX_NNX
from harness.layouts.keras import KERAS
from harness.layouts.keras_cudnn import KERAS_CUDNN
from harness.layouts.mlx import MLX
from harness.layouts.onnx import ONNX
from harness.layouts.tf_block import TF_BLOCK, TF_BLOCK_V2
from harness.layouts.tf_cudnn import TF_CUDNN, TF_CUDNN_PARAMS
from harness.layouts.tf_legacy import TF_LEGACY
from harness.layouts.torch import TORCH

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        CANONICAL,
        TORCH,
        KERAS,
        ONNX,
        TF_BLOCK, TF_BLOCK_V2,
        TF_LEGACY,
        TF_CUDNN, TF_CUDNN_PARAMS, KERAS_CUDNN,
        FLAX, FLAX_NNX,
        MLX,
    )
}


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise HarnessError(f"unknown layout {name!r}; known: {', '.join(LAYOUTS)}") from None
