"""An ONNX model parsed without ``onnx.load``: the outline of its graphs, subgraphs included,
and a tensor's values or an attribute's value only when asked for.

The model may come from a stranger. ``onnx.load`` builds every tensor's data (a 9 MB model of
three million one-byte strings costs hundreds of MB), so instead:

- the structure is checked from the encoding first (:func:`check_structure`: entries counted,
  subgraphs nested at most :data:`MAX_NESTING` deep, nodes and Constants well-formed);
- the model is parsed with a schema that keeps only names, types, shapes, node inputs and
  outputs, and the subgraphs of attributes (:func:`_light_schemas`); everything else (the
  tensors' data, an attribute's numbers) stays unparsed bytes beside its message;
- a tensor is decoded (:func:`tensor_values`) only after its type and declared size are checked
  by the caller, and an attribute's value (:func:`attribute_value`) only after its size is.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from harness.errors import WeightsError

ONNX_DOMAINS = ("", "ai.onnx")  # the standard operator set's; another defines its own LSTM
EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
MAX_GRAPH_ENTRIES = 100_000  # nodes, initializers, inputs, outputs, value infos of all graphs
MAX_ATTRIBUTE_BYTES = 1 << 16  # an operator's attribute other than a tensor or a graph
MAX_NESTING = 32  # onnx.load's protobuf parse stops past 33 (upb's 100 messages, 3 a level)
_NAME_SHOWN = 60  # bytes of a name quoted in a message
_GRAPH_ATTRIBUTE = 5  # AttributeProto.AttributeType.GRAPH


class Malformed(ValueError):
    """A model that breaks ONNX's structure (the reader's message names the file)."""


@functools.cache
def _light_schemas() -> dict[str, type]:
    """Message classes for ONNX's ModelProto, GraphProto, NodeProto, AttributeProto and
    TensorProto with only the fields the finder needs (same numbers and types as onnx.proto):
    parsing keeps the others as unknown fields, raw bytes never built into values, re-emitted
    when a message is serialized (so a tensor's or attribute's own encoding can be rebuilt and
    parsed by onnx once it is known to be small enough)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(name="rnn_harness_onnx_light.proto",
                                               package="rnn_harness_onnx_light",
                                               syntax="proto2")
    messages = {
        "Tensor": [("dims", 1, F.TYPE_INT64, many), ("data_type", 2, F.TYPE_INT32, one),
                   ("name", 8, F.TYPE_STRING, one), ("data_location", 14, F.TYPE_INT32, one)],
        "Sparse": [("values", 1, "Tensor", one)],
        "ValueInfo": [("name", 1, F.TYPE_STRING, one)],
        "Attribute": [("name", 1, F.TYPE_STRING, one), ("type", 20, F.TYPE_INT32, one),
                      ("t", 5, "Tensor", one), ("g", 6, "Graph", one),
                      ("graphs", 11, "Graph", many)],
        "Node": [("input", 1, F.TYPE_STRING, many), ("output", 2, F.TYPE_STRING, many),
                 ("name", 3, F.TYPE_STRING, one), ("op_type", 4, F.TYPE_STRING, one),
                 ("domain", 7, F.TYPE_STRING, one), ("attribute", 5, "Attribute", many)],
        "Graph": [("node", 1, "Node", many), ("initializer", 5, "Tensor", many),
                  ("input", 11, "ValueInfo", many), ("sparse_initializer", 15, "Sparse", many)],
        "OpsetId": [("domain", 1, F.TYPE_STRING, one), ("version", 2, F.TYPE_INT64, one)],
        "Model": [("graph", 7, "Graph", one), ("opset_import", 8, "OpsetId", many)],
    }
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, label in fields:
            f = message.field.add(name=field, number=number, label=label)
            if isinstance(kind, str):
                f.type, f.type_name = F.TYPE_MESSAGE, f".rnn_harness_onnx_light.{kind}"
            else:
                f.type = kind
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"rnn_harness_onnx_light.{name}")) for name in messages}


class OnnxFile:
    """A model's outline: ``graph`` (the light GraphProto, subgraphs inside its nodes'
    attributes) and ``opset`` (the ONNX operator set it imports, None where it names none)."""

    def __init__(self, path: Path, max_bytes: int | None) -> None:
        self.path, self.max_bytes = path, max_bytes
        data = path.read_bytes()
        try:
            check_structure(data)
            model = _light_schemas()["Model"].FromString(data)
        except Malformed as exc:
            raise WeightsError(f"a malformed ONNX model: {exc}", file=path) from None
        except Exception as exc:
            raise WeightsError(f"not a readable ONNX model ({type(exc).__name__}: "
                               f"{(str(exc).splitlines() or [''])[0][:200]})",
                               file=path) from None
        del data  # the light model keeps the bytes it did not parse, once
        self.graph = model.graph
        versions = [o.version for o in model.opset_import if o.domain in ONNX_DOMAINS]
        self.opset: int | None = max(versions) if versions else None

    def refuse_external(self, name: str) -> None:
        raise WeightsError("stored as external data (in another file): refused (weights are "
                           "read from the model file only)", file=self.path, field=name)


def tensor_values(light_tensor) -> np.ndarray:
    """A light TensorProto's values, decoded by onnx (after the caller checked its type and
    declared size): float16 as float16, bfloat16 as float32 (exact), the rest as stored."""
    from onnx import TensorProto, numpy_helper

    proto = TensorProto.FromString(light_tensor.SerializeToString())
    values = numpy_helper.to_array(proto)
    if proto.data_type == TensorProto.BFLOAT16:
        values = np.asarray(values).astype(np.float32)
    if values.shape != tuple(light_tensor.dims):
        raise ValueError(f"tensor {light_tensor.name[:_NAME_SHOWN]!r} holds {values.size} "
                         f"values for dims {list(light_tensor.dims)[:8]}")
    return values


def attribute_value(light_attribute, where: str) -> object:
    """The value of an attribute other than a graph, as ``onnx.helper.get_attribute_value``
    gives it, parsed only when its encoding is small (an operator's numbers and names)."""
    import onnx

    raw = light_attribute.SerializeToString()
    if len(raw) > MAX_ATTRIBUTE_BYTES:
        raise ValueError(f"{where} has an attribute {light_attribute.name[:_NAME_SHOWN]!r} of "
                         f"{len(raw)} bytes, more than the {MAX_ATTRIBUTE_BYTES} an operator's "
                         "numbers and names take")
    return onnx.helper.get_attribute_value(onnx.AttributeProto.FromString(raw))


def subgraphs(node) -> list[tuple[str, object]]:
    """``(label, light GraphProto)`` of a node's graph attributes: ``then_branch`` for ``g``,
    ``branches[1]`` for the second of ``graphs``."""
    out = []
    # an If's then-branch first, whatever order the file keeps its attributes in
    for a in sorted(node.attribute, key=lambda a: a.name != "then_branch"):
        if a.HasField("g"):
            out.append((a.name, a.g))
        out += [(f"{a.name}[{k}]", g) for k, g in enumerate(a.graphs)]
    return out


# The structure, from the encoding --------------------------------------------------------------

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes, start: int, end: int):
    """(field number, wire type, start, end of its value) of each field of one message's
    encoding, without decoding any value."""
    pos = start
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = _varint(data, pos)
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            after = pos + size
        elif wire == 5:
            after = pos + 4
        else:
            raise ValueError(f"wire type {wire} (groups are not ONNX)")
        if after > end:
            raise ValueError("a field past the end of its message")
        yield number, wire, pos, after
        pos = after


_MODEL_GRAPH, _MODEL_FUNCTIONS = 7, 25  # ModelProto.graph, ModelProto.functions
_NODE_FIELD = {_MODEL_GRAPH: 1, _MODEL_FUNCTIONS: 7}  # GraphProto.node, FunctionProto.node


def check_structure(data: bytes) -> None:
    """Refuse a model whose graphs are malformed, from the encoding, before anything is parsed
    and without reading a tensor's data:

    - every graph's and function's nodes, subgraphs included, are well-formed protobuf with the
      wire types ONNX declares;
    - subgraphs nest at most :data:`MAX_NESTING` deep (the walk keeps its own stack: a file
      nesting thousands deep costs neither Python's recursion nor protobuf's);
    - at most :data:`MAX_GRAPH_ENTRIES` entries in all graphs together;
    - a node names its operator; an attribute its name; an ONNX ``Constant`` has exactly one
      attribute and one named output.
    """
    entries = 0
    # (start, end, nesting, the field number of the container's nodes, what it is)
    todo: list[tuple[int, int, int, int, str]] = []
    for number, wire, start, end in _fields(data, 0, len(data)):
        if number in (_MODEL_GRAPH, _MODEL_FUNCTIONS):
            _want_message(wire, "the model's graph" if number == _MODEL_GRAPH else "a function")
            todo.append((start, end, 0, _NODE_FIELD[number],
                         "the graph" if number == _MODEL_GRAPH else "a function"))
    while todo:
        start, end, depth, node_field, where = todo.pop()
        for number, wire, begin, after in _fields(data, start, end):
            entries += 1
            if entries > MAX_GRAPH_ENTRIES:
                raise ValueError(f"a graph of more than {MAX_GRAPH_ENTRIES} entries")
            if number == node_field:
                _want_message(wire, f"a node of {where}")
                for sub_start, sub_end, holder in _node_subgraphs(data, begin, after, where):
                    if depth + 1 > MAX_NESTING:
                        raise Malformed(f"subgraphs nested more than {MAX_NESTING} deep "
                                        f"({holder})")
                    todo.append((sub_start, sub_end, depth + 1, 1,
                                 f"a subgraph {depth + 1} deep"))


def _want_message(wire: int, what: str) -> None:
    if wire != 2:
        raise Malformed(f"{what} is not a message (wire type {wire})")


def _text(data: bytes, start: int, end: int) -> str:
    return data[start:min(end, start + _NAME_SHOWN)].decode("utf-8", "replace")


def _node_subgraphs(data: bytes, start: int, end: int, where: str
                    ) -> list[tuple[int, int, str]]:
    """The spans of one node's subgraphs (attributes ``g`` and ``graphs``) and what holds
    each, after the node's own fields are checked."""
    op_type = name = domain = ""
    outputs: list[bool] = []  # whether each output is named
    attributes: list[tuple[int, int]] = []
    for number, wire, begin, after in _fields(data, start, end):
        if number in (1, 2, 3, 4, 5, 7):  # input, output, name, op_type, attribute, domain
            _want_message(wire, f"field {number} of a node of {where}")
        if number == 2:
            outputs.append(after > begin)
        elif number == 3:
            name = _text(data, begin, after)
        elif number == 4:
            op_type = _text(data, begin, after)
        elif number == 5:
            attributes.append((begin, after))
        elif number == 7:
            domain = _text(data, begin, after)
    node = f"node {name!r} ({op_type or 'no operator'}) of {where}"
    if not op_type:
        raise Malformed(f"{node} names no operator")
    if op_type == "Constant" and domain in ONNX_DOMAINS:
        if len(outputs) != 1 or not outputs[0]:
            raise Malformed(f"{node} has {len(outputs)} output(s)"
                            f"{'' if all(outputs) else ', one unnamed'}; a Constant has "
                            "exactly one, named")
        if len(attributes) != 1:
            raise Malformed(f"{node} has {len(attributes)} attributes; a Constant has exactly "
                            "one (its value)")
    subgraphs = []
    for begin, after in attributes:
        attribute, graphs = "", []
        for number, wire, a, b in _fields(data, begin, after):
            if number in (1, 5, 6, 11):  # name, t, g, graphs
                _want_message(wire, f"field {number} of an attribute of {node}")
            if number == 1:
                attribute = _text(data, a, b)
            elif number in (6, 11):
                graphs.append((a, b))
        if not attribute:
            raise Malformed(f"{node} has an attribute without a name")
        subgraphs += [(a, b, f"attribute {attribute!r} of {node}") for a, b in graphs]
    return subgraphs
