"""Small ONNX models built with onnx.helper, for the tests of the ONNX reader's layer finder and
constant folder: a model of a few nodes saved to a file, an initializer, a Constant node.
Importing this module imports onnx: a test module imports it after its ``importorskip``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save_model(path: Path, nodes, inits=(), opset: int = 17, inputs=(), outputs=("Y",)) -> Path:
    graph = helper.make_graph(
        list(nodes), "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path.write_bytes(model.SerializeToString())
    return path


def initializer(name: str, a: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(a, name)


def constant(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"c_{name}",
                            value=numpy_helper.from_array(np.asarray(values, dtype), name))
