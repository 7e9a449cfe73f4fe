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


def lstm_model(path: Path, W: np.ndarray, R: np.ndarray, b: np.ndarray,
               x_shape: tuple[int, int, int], direction: str = "forward") -> Path:
    """One ONNX ``LSTM`` node (W, R, B initializers in float32, X of ``x_shape`` [T, B, I],
    output Y), opset 17, saved to ``path``."""
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"],
                          hidden_size=R.shape[-1], direction=direction, name="lstm")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in
         (("W", W), ("R", R), ("B", b))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
