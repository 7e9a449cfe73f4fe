"""Malformed ONNX models are refused, naming the file (issue 53, item 8): the reader parses an
outline of the graph rather than calling ``onnx.load``, so it checks the graph's structure
itself, subgraphs included, from the encoding and without reading any tensor's data, with its
own bound on how deep subgraphs nest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.protobuf import field as _field
from support.protobuf import key as _key
from support.protobuf import varint as _varint

from harness.cli import main

I, H = 2, 3


def _lstm_model(path: Path, *extra_nodes) -> Path:
    """A one-node LSTM model that reads, with ``extra_nodes`` (NodeProtos) in its graph."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("LSTM", ["X", "W", "R"], ["Y"], name="rnn", hidden_size=H)
    inits = [numpy_helper.from_array(np.zeros((1, 4 * H, n), np.float32), w)
             for w, n in (("W", I), ("R", H))]
    graph = helper.make_graph([node, *extra_nodes], "g", [helper.make_tensor_value_info(
        "X", TensorProto.FLOAT, [1, 1, I])], [helper.make_tensor_value_info(
            "Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def _nested_ifs(depth: int) -> bytes:
    """A NodeProto (``If``) whose ``then_branch`` holds a graph whose one node is an ``If``
    ..., ``depth`` graphs deep, built as bytes as an attacker would (protobuf's own encoder
    refuses to go past its recursion limit)."""
    graph = _field(2, b"leaf")  # GraphProto.name
    node = b""
    for k in range(depth):
        attribute = _field(1, b"then_branch") + _key(20, 0) + _varint(5) + _field(6, graph)
        node = (_field(1, b"cond") + _field(2, f"o{k}".encode()) + _field(4, b"If")
                + _field(5, attribute))  # input, output, op_type, attribute (type GRAPH, g)
        graph = _field(1, node) + _field(2, f"g{k}".encode())  # GraphProto.node, .name
    return node


def _with_node(path: Path, node: bytes) -> Path:
    """``path`` with one more node in its graph: a second ModelProto.graph, which protobuf
    merges into the first."""
    with path.open("ab") as f:
        f.write(_field(7, _field(1, node)))
    return path


def convert(path: Path, tmp_path: Path, capsys) -> tuple[int, list[str]]:
    code = main(["convert", "--to", "torch", str(path), str(tmp_path / "o.npz")])
    return code, capsys.readouterr().err.splitlines()


def test_a_constant_node_without_an_output_is_refused(tmp_path, capsys):
    pytest.importorskip("onnx")
    from onnx import helper

    constant = helper.make_node("Constant", [], [], name="k",
                                value=helper.make_tensor("v", 1, [1], [1.0]))
    path = _lstm_model(tmp_path / "constant.onnx", constant)
    code, err = convert(path, tmp_path, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"rnn-harness: error: {path}: a malformed ONNX model: node 'k' (Constant) "
                      "of the graph has 0 output(s); a Constant has exactly one, named"), err


def test_two_thousand_nested_subgraphs_are_refused_at_the_bound(tmp_path, capsys):
    """2,000 ``If`` subgraphs, each inside the last: beyond protobuf's depth limit, which
    ``onnx.load`` hit; the reader's own walk stops at its bound, with no recursion."""
    path = _with_node(_lstm_model(tmp_path / "deep.onnx"), _nested_ifs(2000))
    code, err = convert(path, tmp_path, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"rnn-harness: error: {path}: a malformed ONNX model: subgraphs "
                             "nested more than 32 deep (attribute 'then_branch' of node '' "
                             "(If) of a subgraph 32 deep)"), err


@pytest.mark.parametrize("depth, refused", [(32, False), (33, True)])
def test_the_bound_on_nesting(depth, refused, tmp_path, capsys):
    """32 nested subgraphs (as deep as protobuf's own parse of a model goes) read; 33 do not."""
    path = _with_node(_lstm_model(tmp_path / f"d{depth}.onnx"), _nested_ifs(depth))
    code, err = convert(path, tmp_path, capsys)
    assert code == (2 if refused else 0), err
    assert ("nested more than 32 deep" in " ".join(err)) == refused, err


@pytest.mark.parametrize("node, words", [
    (_field(2, b"y"), "node '' (no operator) of the graph names no operator"),
    (_field(4, b"Relu") + _field(5, _key(3, 0) + _varint(1)),
     "node '' (Relu) of the graph has an attribute without a name"),
    (_field(4, b"Constant") + _field(2, b"") + _field(5, _field(1, b"value_float")),
     "node '' (Constant) of the graph has 1 output(s), one unnamed"),
    (_field(4, b"If") + _field(5, _field(1, b"then_branch") + _field(6, _field(1, _key(4, 0)
                                                                         + _varint(7)))),
     "field 4 of a node of a subgraph 1 deep is not a message (wire type 0)"),
], ids=["no operator", "unnamed attribute", "unnamed Constant output", "subgraph's wire type"])
def test_a_malformed_node_is_refused(node, words, tmp_path, capsys):
    path = _with_node(_lstm_model(tmp_path / "odd.onnx"), node)
    code, err = convert(path, tmp_path, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"rnn-harness: error: {path}: a malformed ONNX model: ") \
        and words in err[0], err
