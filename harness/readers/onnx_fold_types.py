"""What a constant fold of ONNX weights (:mod:`harness.readers.onnx_fold`) holds and raises:
the element types it folds, a folded tensor's type and shape known before it is computed
(:class:`Meta`), how one tensor is computed (:class:`Plan`), the plan of a stored tensor
(:func:`stored`), and its errors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.readers.onnx_proto import EXTERNAL, tensor_values

MAX_RANK = 32  # of a folded tensor

# TensorProto.DataType -> (name, NumPy dtype it is held in, bytes an element takes held)
DTYPES = {1: ("FLOAT", np.float32, 4), 10: ("FLOAT16", np.float16, 2),
          11: ("DOUBLE", np.float64, 8), 16: ("BFLOAT16", np.float32, 4),  # bf16 held exactly
          6: ("INT32", np.int32, 4), 7: ("INT64", np.int64, 8)}
FLOATS = (1, 10, 11, 16)
INTEGERS = (6, 7)


class NotConstant(Exception):
    """A weight that depends on something other than constants (the message says what)."""


class FoldError(Exception):
    """A chain that cannot or may not be folded (malformed, hostile, too large)."""


class Bad(Exception):
    """A node the folder refuses (the message follows the node's name)."""


def dtype_name(code: int) -> str:
    from onnx import TensorProto

    if code in DTYPES:
        return DTYPES[code][0]
    return (TensorProto.DataType.Name(code) if code in TensorProto.DataType.values()
            else str(code))


@dataclass(frozen=True)
class Meta:
    """A folded tensor's ONNX element type and shape, known before it is computed."""

    code: int
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.code][2]


def node_text(node) -> str:
    """A node in an error line: its name and operator, both cut short."""
    return f"node {node.name[:60]!r} ({node.op_type[:40]})"


@dataclass
class Plan:
    """How one folded tensor is computed: ``compute(*inputs)`` of the data ``inputs`` (names
    in ``scope``), or ``load()`` for a stored tensor."""

    meta: Meta
    scope: Any = None  # the harness.readers.onnx_fold.Scope the inputs are named in
    inputs: tuple[str, ...] = ()
    compute: object = None
    load: object = None


def stored(tensor, what: str, max_bytes: int | None) -> Plan:
    """The plan of a stored tensor (an initializer, a Constant's value): its declared type
    and dims checked, and its size against ``max_bytes`` (None: no limit), before it is
    decoded."""
    if tensor.data_location == EXTERNAL:
        raise FoldError(f"{what} is stored as external data (in another file): refused "
                        "(weights are read from the model file only)")
    if tensor.data_type not in DTYPES:
        raise FoldError(f"{what} holds {dtype_name(tensor.data_type)} values; expected "
                        "float, double, float16 or bfloat16 (int32 or int64 for shapes, "
                        "axes and indices)")
    dims = tuple(tensor.dims)
    if any(d < 0 for d in dims) or len(dims) > MAX_RANK:
        raise FoldError(f"{what} declares dims {list(dims)[:8]}")
    code = tensor.data_type
    meta = Meta(code, dims)
    if max_bytes is not None and meta.nbytes > max_bytes:
        raise FoldError(f"{what} declares dims {list(dims)[:8]} of {dtype_name(code)}: "
                        f"{meta.nbytes} bytes, more than the memory limit of "
                        f"{max_bytes} bytes")
    return Plan(meta, load=lambda: tensor_values(tensor).astype(DTYPES[code][1],
                                                                 copy=False))
