"""ONNX models (``.onnx``, layout ``onnx``): the ``W``, ``R``, ``B``, ``P`` initializers of the
model's LSTM/GRU nodes, checked against the case (a missing ``B`` or ``P`` is zeros, as the
operator defines: the layout's optional tensors, applied by ``Layout.from_native``). A tensor
stored as external data (in another file) is refused, never read.

The model may come from a stranger, so it is not parsed whole (``onnx.load`` builds every
tensor's data, a 9 MB model of three million one-byte strings costs hundreds of MB): the graph's
entries are counted in the protobuf encoding first, then the graph is parsed with a schema that
keeps only names, types, shapes and node attributes (:func:`_light_schemas`: the data stays
unparsed bytes), and only the tensors the recurrent nodes use are parsed and converted, after
their type and declared size are checked. Nodes are the ONNX operators only (domain ``""`` or
``ai.onnx``); weights are floating-point.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from harness.cells import cell_named
from harness.errors import WeightsError
from harness.spec import Case

SUFFIXES = (".onnx",)

_ONNX_DOMAINS = ("", "ai.onnx")  # the standard operator set's; another defines its own LSTM
# TensorProto.DataType: the floating-point types whose values are read (converted to float64)
_FLOAT_TYPES = {1: "FLOAT", 10: "FLOAT16", 11: "DOUBLE", 16: "BFLOAT16"}
_ITEM_BYTES = {1: 4, 10: 2, 11: 8, 16: 2}
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
_MAX_GRAPH_ENTRIES = 100_000  # nodes, initializers, inputs, outputs, value infos of a graph
_MAX_ATTRIBUTE_BYTES = 1 << 16  # an LSTM/GRU attribute is a number or a few names
# ONNX HardSigmoid(x) = max(0, min(1, alpha x + beta)): (alpha, beta) of each hard sigmoid case
_HARD_SIGMOIDS = {"hard_sigmoid_tf_keras": (0.2, 0.5), "hard_sigmoid_keras3": (1 / 6, 0.5)}


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The nodes' tensors (:func:`read_onnx`); a layout other than ``onnx`` is refused."""
    if layout != "onnx":
        raise WeightsError(f"an ONNX model holds `onnx` tensors, not {layout!r}; use "
                           "--from onnx", file=path)
    return read_onnx(path, case, select=select, max_bytes=max_bytes)


def read_onnx(path: Path, case: Case, *, select: str | None = None,
              max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """``W``, ``R``, ``B``, ``P`` of the model's LSTM/GRU nodes (graph order = layer order).

    ``max_bytes``: the memory limit; a used tensor declaring more is refused before it is
    parsed."""
    model = _Model(path, max_bytes)
    op = case.cell.upper()
    nodes = [n for n in model.recurrent_nodes() if n.op_type == op]
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        nodes = [n for n in nodes if n.name in wanted]
    if not nodes:
        raise WeightsError(f"no {op} node" + (f" named {select!r}" if select else "") +
                           " in the model", file=path)
    if len(nodes) != case.num_layers:
        raise WeightsError(f"the model has {len(nodes)} {op} node(s) ("
                           f"{', '.join(n.name or '?' for n in nodes)}), the case has "
                           f"{case.num_layers} layer(s); choose nodes with --select", file=path)
    native, notes = {}, []
    for k, node in enumerate(nodes):
        attrs = model.attributes(node)
        _check_onnx_attrs(path, node.name, attrs, case)
        name = (lambda n: n) if case.num_layers == 1 else (lambda n, k=k: f"layer{k}/{n}")
        inputs = list(node.input) + [""] * 8
        # Optional inputs left out take the operator's defaults (Layout.from_native: B and P
        # zeros); constant lengths or states are read so that from_native can check them.
        for idx, tname in ((1, "W"), (2, "R"), (3, "B"), (4, "sequence_lens"), (5, "initial_h"),
                           (6, "initial_c"), (7, "P")):
            src = inputs[idx]
            if not src:
                if tname in ("W", "R"):
                    raise WeightsError(f"node {node.name!r} has no {tname} input", file=path)
                if tname in ("B", "P") and (tname == "B" or case.peepholes):
                    notes.append(f"node {node.name!r} has no {tname}: zeros, as the operator "
                                 "defines")
                continue
            where = f"node {node.name!r} input {tname} ({src!r})"
            value = model.constant(src, where, integer=tname == "sequence_lens")
            if value is None:
                if tname in ("W", "R", "B", "P"):
                    raise WeightsError(f"{where} is computed, not an initializer: export with "
                                       "constant folding", file=path)
                continue  # lengths and states fed at run time: the inputs file's business
            key = "sequence_lens" if tname == "sequence_lens" else name(tname)
            native[key] = np.asarray(value, dtype=np.float64)
        notes.append(f"read {op} node {node.name or k!r}")
    return native, notes


# The model, parsed without its tensors' data -----------------------------------------------------

@functools.cache
def _light_schemas() -> dict[str, type]:
    """Message classes for ONNX's ModelProto, GraphProto, NodeProto, TensorProto and
    AttributeProto with only the fields the reader needs (same numbers and types as onnx.proto):
    parsing skips the others as unknown fields, kept as raw bytes, never built into values.
    ``AttributeBytes`` holds a Constant's tensor's encoding, parsed later if used."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    proto = descriptor_pb2.FileDescriptorProto(name="rnn_harness_onnx_outline.proto",
                                               package="rnn_harness_onnx", syntax="proto2")
    messages = {
        "Tensor": [("dims", 1, F.TYPE_INT64, many), ("data_type", 2, F.TYPE_INT32, one),
                   ("name", 8, F.TYPE_STRING, one), ("data_location", 14, F.TYPE_INT32, one)],
        "Attribute": [("name", 1, F.TYPE_STRING, one), ("t", 5, "Tensor", one)],
        "AttributeBytes": [("t", 5, F.TYPE_BYTES, one)],
        "Node": [("input", 1, F.TYPE_STRING, many), ("output", 2, F.TYPE_STRING, many),
                 ("name", 3, F.TYPE_STRING, one), ("op_type", 4, F.TYPE_STRING, one),
                 ("domain", 7, F.TYPE_STRING, one), ("attribute", 5, F.TYPE_BYTES, many)],
        "Graph": [("node", 1, "Node", many), ("initializer", 5, "Tensor", many)],
        "Model": [("graph", 7, "Graph", one)],
    }
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, label in fields:
            f = message.field.add(name=field, number=number, label=label)
            if isinstance(kind, str):
                f.type, f.type_name = F.TYPE_MESSAGE, f".rnn_harness_onnx.{kind}"
            else:
                f.type = kind
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"rnn_harness_onnx.{name}")) for name in messages}


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
_MAX_NESTING = 32  # onnx.load's protobuf parse stops past 33 (upb's 100 messages, 3 a level)
_NAME_SHOWN = 60  # bytes of a name quoted in a message


class Malformed(ValueError):
    """A model that breaks ONNX's structure (the reader's message names the file)."""


def _check_structure(data: bytes) -> None:
    """Refuse a model whose graphs are malformed, from the encoding, before anything is parsed
    and without reading a tensor's data: the light parse keeps attributes as bytes, so without
    this walk a subgraph (an ``If`` branch, a ``Loop`` body) would never be looked at.

    - every graph's and function's nodes, subgraphs included, are well-formed protobuf with the
      wire types ONNX declares;
    - subgraphs nest at most :data:`_MAX_NESTING` deep (the walk keeps its own stack: a file
      nesting thousands deep costs neither Python's recursion nor protobuf's);
    - at most :data:`_MAX_GRAPH_ENTRIES` entries in all graphs together;
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
            if entries > _MAX_GRAPH_ENTRIES:
                raise ValueError(f"a graph of more than {_MAX_GRAPH_ENTRIES} entries")
            if number == node_field:
                _want_message(wire, f"a node of {where}")
                for sub_start, sub_end, holder in _node_subgraphs(data, begin, after, where):
                    if depth + 1 > _MAX_NESTING:
                        raise Malformed(f"subgraphs nested more than {_MAX_NESTING} deep "
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
    if op_type == "Constant" and domain in _ONNX_DOMAINS:
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
            if number in (1, 6, 11):  # name, g, graphs
                _want_message(wire, f"field {number} of an attribute of {node}")
            if number == 1:
                attribute = _text(data, a, b)
            elif number in (6, 11):
                graphs.append((a, b))
        if not attribute:
            raise Malformed(f"{node} has an attribute without a name")
        subgraphs += [(a, b, f"attribute {attribute!r} of {node}") for a, b in graphs]
    return subgraphs


def _initializer_encoding(data: bytes, index: int) -> bytes:
    """The encoding of the graph's ``index``-th initializer (in the order protobuf merges the
    graph's occurrences), found in the bytes rather than parsed."""
    k = 0
    for number, wire, start, end in _fields(data, 0, len(data)):
        if number == 7 and wire == 2:
            for field, kind, begin, after in _fields(data, start, end):
                if field == 5 and kind == 2:
                    if k == index:
                        return data[begin:after]
                    k += 1
    raise ValueError(f"no initializer {index}")


class _Model:
    """An ONNX model's nodes and its tensors' names, types and shapes; a tensor's data is
    parsed only when :meth:`constant` is asked for it."""

    def __init__(self, path: Path, max_bytes: int | None) -> None:
        self.path, self.max_bytes = path, max_bytes
        self.data = path.read_bytes()
        schemas = _light_schemas()
        try:
            _check_structure(self.data)
            self.graph = schemas["Model"].FromString(self.data).graph
            self.graph.DiscardUnknownFields()  # the tensors' data: read from self.data if used
        except Malformed as exc:
            raise WeightsError(f"a malformed ONNX model: {exc}", file=path) from None
        except Exception as exc:
            raise WeightsError(f"not a readable ONNX model ({type(exc).__name__}: "
                               f"{(str(exc).splitlines() or [''])[0][:200]})",
                               file=path) from None
        self._defined: dict[str, list] | None = None
        for t in self.graph.initializer:
            if t.data_location == _EXTERNAL:
                self.refuse_external(t.name)

    def refuse_external(self, name: str) -> None:
        raise WeightsError("stored as external data (in another file): refused (weights are "
                           "read from the model file only)", file=self.path, field=name)

    def recurrent_nodes(self) -> list:
        """The graph's LSTM and GRU nodes; one from another operator set than ONNX's is
        refused (its semantics are that domain's)."""
        nodes = []
        for n in self.graph.node:
            if n.op_type in ("LSTM", "GRU"):
                if n.domain not in _ONNX_DOMAINS:
                    raise WeightsError(f"node {n.name!r} is an {n.op_type} of the domain "
                                       f"{n.domain[:60]!r}, not the ONNX operator (domain '' or "
                                       "'ai.onnx'): what it computes is that domain's",
                                       file=self.path)
                nodes.append(n)
        return nodes

    def attributes(self, node) -> dict:
        """Name -> value of a node's attributes, each parsed after its size is checked."""
        import onnx

        attrs = {}
        for raw in node.attribute:
            if len(raw) > _MAX_ATTRIBUTE_BYTES:
                raise WeightsError(f"node {node.name!r} has an attribute of {len(raw)} bytes, "
                                   f"more than the {_MAX_ATTRIBUTE_BYTES} an {node.op_type}'s "
                                   "numbers and names take", file=self.path)
            a = onnx.AttributeProto.FromString(raw)
            attrs[a.name] = onnx.helper.get_attribute_value(a)
        return attrs

    def outline(self, name: str, where: str):
        """The light TensorProto (name, type, dims) of the initializer or Constant node output
        ``name`` and how to get its encoding, or None where it is computed."""
        if self._defined is None:  # name -> its definitions, once
            self._defined = {}
            for k, t in enumerate(self.graph.initializer):
                self._defined.setdefault(t.name, []).append((t, ("initializer", k)))
            for k, n in enumerate(self.graph.node):
                if n.op_type == "Constant" and n.domain in _ONNX_DOMAINS and n.output:
                    for j, raw in enumerate(n.attribute):
                        a = _light_schemas()["Attribute"].FromString(raw)
                        if a.name == "value" and a.HasField("t"):
                            self._defined.setdefault(n.output[0], []).append(
                                (a.t, ("constant", k, j)))
        found = self._defined.get(name, [])
        if len(found) > 1:
            raise WeightsError(f"{where}: the model defines {name!r} {len(found)} times "
                               "(initializers or Constant nodes): which one counts is ambiguous",
                               file=self.path)
        return found[0] if found else None

    def constant(self, name: str, where: str, *, integer: bool = False) -> np.ndarray | None:
        """The values of the initializer or Constant output ``name``, or None where it is
        computed. Its type is checked (floating point, or ``integer`` for lengths) and its
        declared size against the memory limit before its data is parsed."""
        from onnx import TensorProto, numpy_helper

        found = self.outline(name, where)
        if found is None:
            return None
        t, (kind, *at) = found
        if t.data_location == _EXTERNAL:
            self.refuse_external(name)
        dtype = TensorProto.DataType.Name(t.data_type) if t.data_type in \
            TensorProto.DataType.values() else str(t.data_type)
        ints = {TensorProto.INT32: 4, TensorProto.INT64: 8}
        if t.data_type not in (ints if integer else _FLOAT_TYPES):
            want = "int32 or int64" if integer else "float, double, float16 or bfloat16"
            raise WeightsError(f"{where} holds {dtype} values; expected {want}", file=self.path)
        itemsize = (ints if integer else _ITEM_BYTES)[t.data_type]
        count = math.prod(t.dims)  # Python ints: no overflow
        if any(d < 0 for d in t.dims) or (self.max_bytes is not None
                                          and count * itemsize > self.max_bytes):
            raise WeightsError(f"{where} declares dims {list(t.dims)[:8]} of {dtype}: "
                               f"{count * itemsize} bytes, more than the memory limit of "
                               f"{self.max_bytes} bytes", file=self.path)
        if kind == "initializer":
            raw = _initializer_encoding(self.data, at[0])
        else:
            node = self.graph.node[at[0]]
            raw = _light_schemas()["AttributeBytes"].FromString(node.attribute[at[1]]).t
        return numpy_helper.to_array(TensorProto.FromString(raw))


def _check_onnx_attrs(path: Path, node: str, attrs: dict, case: Case) -> None:
    def say(attr: str, got: object, want: object) -> None:
        raise WeightsError(f"node {node!r} has {attr}={got!r}, the case says {want!r}", file=path)

    direction = _direction(path, node, attrs)
    if direction != case.dir_mode:
        say("direction", direction, case.dir_mode)
    if attrs.get("hidden_size", case.hidden_size) != case.hidden_size:
        say("hidden_size", attrs["hidden_size"], case.hidden_size)
    if attrs.get("layout", 0) != 0:
        say("layout", attrs["layout"], 0)
    if (case.cell_kind.reads("reset_after")
            and attrs.get("linear_before_reset", 0) != int(case.reset_after)):
        say("linear_before_reset", attrs.get("linear_before_reset", 0), int(case.reset_after))
    if (case.cell_kind.reads("input_forget")
            and attrs.get("input_forget", 0) != int(case.input_forget)):
        say("input_forget", attrs.get("input_forget", 0), int(case.input_forget))
    clip = attrs.get("clip")
    if (clip is None) != (case.gate_clip is None) or (clip is not None and
                                                      abs(clip - case.gate_clip) > 1e-6):
        say("clip", clip, case.gate_clip)
    activation = _gate_activation(path, node, attrs, case.cell, case.num_directions)
    if activation != case.recurrent_activation:
        say("activations", attrs.get("activations"), case.recurrent_activation)


def _direction(path: Path, node: str, attrs: dict) -> str:
    direction = attrs.get("direction", b"forward")
    direction = direction.decode("utf-8", "replace") if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise WeightsError(f"node {node!r} has direction={str(direction)[:40]!r}; expected "
                           "forward, reverse or bidirectional", file=path)
    return direction


def _gate_activation(path: Path, node: str, attrs: dict, cell: str, directions: int) -> str:
    """The case's ``recurrent_activation`` the node's ``activations`` (and ``activation_alpha``
    and ``_beta``) spell: per direction Sigmoid or HardSigmoid for the gates, then Tanh for the
    candidate (and, with a cell state, the output); anything else is refused."""
    acts = [a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a)
            for a in attrs.get("activations", [])]
    if not acts:
        return "sigmoid"
    per = 3 if cell_named(cell).has_cell_state else 2  # f, g (and h)
    shape = f"{per} per direction: the gates', then Tanh" + (" twice" if per == 3 else "")
    if len(acts) != per * directions:
        raise WeightsError(f"node {node!r} has {len(acts)} activations {acts[:8]}; expected "
                           f"{per * directions} ({shape})", file=path)
    gates = set(acts[::per])
    if len(gates) != 1 or not gates <= {"Sigmoid", "HardSigmoid"} or any(
            a != "Tanh" for k, a in enumerate(acts) if k % per):
        raise WeightsError(f"node {node!r} has activations {acts}; the harness reads Sigmoid "
                           f"or HardSigmoid gates with Tanh ({shape})", file=path)
    if acts[0] == "Sigmoid":
        return "sigmoid"
    alphas = set(attrs.get("activation_alpha") or [0.2])  # the operator's defaults
    betas = set(attrs.get("activation_beta") or [0.5])
    for name, (alpha, beta) in _HARD_SIGMOIDS.items():
        if all(abs(a - alpha) < 1e-6 for a in alphas) and all(abs(b - beta) < 1e-6
                                                              for b in betas):
            return name
    raise WeightsError(f"node {node!r} has HardSigmoid alpha {sorted(alphas)} and beta "
                       f"{sorted(betas)}; the harness reads alpha 0.2 (tf_keras) or 1/6 "
                       "(Keras 3) with beta 0.5", file=path)


def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields of the first LSTM/GRU node (the stack's depth from their number): its
    attributes (hidden_size, direction, clip, input_forget, linear_before_reset, HardSigmoid
    activations) and its ``W``/``P`` inputs."""
    model = _Model(path, max_bytes)
    nodes = model.recurrent_nodes()
    if select is not None:
        wanted = [s.strip() for s in select.split(",")]
        nodes = [n for n in nodes if n.name in wanted]
    if not nodes:
        raise WeightsError("no LSTM or GRU node in the model", file=path)
    ops = {n.op_type for n in nodes}
    if len(ops) > 1:
        raise WeightsError("the model has both LSTM and GRU nodes; choose with --select",
                           file=path)
    first = nodes[0]
    attrs = model.attributes(first)
    cell = first.op_type.lower()
    hidden = attrs.get("hidden_size")
    if hidden is None:
        raise WeightsError(f"node {first.name!r} has no hidden_size attribute: cannot tell the "
                           "sizes", file=path)
    if not isinstance(hidden, int) or hidden < 1:
        raise WeightsError(f"node {first.name!r} has hidden_size={hidden!r}; expected a "
                           "positive integer", file=path)
    W = first.input[1] if len(first.input) > 2 else ""
    if not W or not first.input[2]:
        raise WeightsError(f"node {first.name!r} has no W and R inputs: cannot tell the sizes",
                           file=path)
    found = model.outline(W, f"node {first.name!r} input W")
    if found is None:
        raise WeightsError(f"node {first.name!r} input W is computed, not an initializer",
                           file=path)
    dims = list(found[0].dims)
    if len(dims) != 3 or dims[2] < 1:
        raise WeightsError(f"node {first.name!r} input W has dims {dims[:8]}; expected "
                           "[directions, gates x hidden_size, input_size]", file=path)
    direction = _direction(path, first.name, attrs)
    fields: dict = {"cell": cell, "input_size": int(dims[2]), "hidden_size": hidden,
                    "num_layers": len(nodes), "direction": direction}
    if attrs.get("clip") is not None:
        fields["gate_clip"] = float(attrs["clip"])
    if cell_named(cell).reads("input_forget"):
        fields["input_forget"] = bool(attrs.get("input_forget", 0))
        fields["peepholes"] = len(first.input) > 7 and bool(first.input[7])
    else:
        fields["reset_after"] = bool(attrs.get("linear_before_reset", 0))
    directions = 2 if direction == "bidirectional" else 1
    activation = _gate_activation(path, first.name, attrs, cell, directions)
    if activation != "sigmoid":
        fields["recurrent_activation"] = activation
    return fields, "onnx", []
