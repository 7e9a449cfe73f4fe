"""An OpenVINO IR (``model.xml`` with ``model.bin`` beside it), read without OpenVINO and
without running it: its ``LSTMSequence`` and ``GRUSequence`` ops (opset5 and later), their
attributes and sizes, and their ``W``, ``R``, ``B`` inputs read from the .bin where they are
``Const`` ops (a ``Convert`` between is the f16 -> f32 decompression ``compress_to_fp16``
writes).

The files may come from strangers. The .xml is parsed with expat directly, refusing any
DOCTYPE (so no entity, internal or external, can be declared or expanded), within the memory
limit; every ``Const`` slice of the .bin is checked against the .bin's size, its declared shape
and element type, and the memory limit before it is read.

OpenVINO's sequence ops (docs.openvino.ai, LSTMSequence-5 / GRUSequence-5):

    inputs   LSTMSequence: X [batch, seq, input], H_t, C_t [batch, dirs, hidden],
             seq_lengths [batch], W [dirs, 4H, input], R [dirs, 4H, H], B [dirs, 4H]
             GRUSequence:  X, H_t, seq_lengths, W [dirs, 3H, input], R [dirs, 3H, H],
             B [dirs, 3H] (linear_before_reset: [dirs, 4H])
    gates    LSTM f, i, c, o; GRU z, r, h
    B        one bias per gate, the input and recurrent biases summed (GRU with
             linear_before_reset: z and r summed, then the input and recurrent biases of h)

:func:`onnx_native` turns an op's tensors into ONNX's ``W``, ``R``, ``B`` (gates i, o, f, c; B
= [Wb | Rb]) with each summed bias in ``Wb`` and zeros in ``Rb``: the layout the rest of the
harness reads. A ``TensorIterator`` stepping one ``LSTMCell``/``GRUCell`` over time is read as
one such layer (:mod:`harness.readers.openvino_loop`); the cells inside other loop bodies are
not read: such a file is named as not readable, with the body's ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

import numpy as np

from harness.cells import cell_named
from harness.errors import WeightsError
from harness.readers.limits import check_file, check_size
from harness.readers.openvino_loop import CELL_PORTS, LoopCell, recognize

SUFFIXES = (".xml",)
SEQUENCE_OPS = {"LSTMSequence": "lstm", "GRUSequence": "gru"}
LOOP_OPS = ("TensorIterator", "Loop")
CELL_OPS = ("LSTMCell", "GRUCell", "RNNCell", "RNNSequence")
# an op's input ports: the data inputs and the weights
DATA_PORTS = {"lstm": {"X": 0, "H": 1, "C": 2, "seq_lengths": 3},
              "gru": {"X": 0, "H": 1, "seq_lengths": 2}}
WEIGHT_PORTS = {"lstm": {"W": 4, "R": 5, "B": 6}, "gru": {"W": 3, "R": 4, "B": 5}}
# the gate blocks of OpenVINO's order, by index, in ONNX's order (LSTM i, o, f, c; GRU z, r, h)
OPENVINO_ORDER = {"lstm": "fico", "gru": "zrh"}
ONNX_ORDER = {"lstm": "iofc", "gru": "zrh"}
ELEMENT_TYPES = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "bf16": "bf16"}
STORED = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16"}


@dataclass
class IrOp:
    """One op of the IR (or of a loop's body): its ``id``, ``name``, ``type``, ``version``, the
    ``data`` attributes, the dims of its input ports (None: dynamic), the ids of its output
    ports, and, for a TensorIterator or Loop, the types of the ops anywhere in its body, its
    body's own ops and edges (``graph``), ``port_map`` and ``back_edges``."""

    id: str
    name: str
    type: str
    version: str
    data: dict[str, str] = field(default_factory=dict)
    inputs: dict[int, list[int | None]] = field(default_factory=dict)
    body: list[str] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)  # output port ids, in order
    # a TensorIterator's or Loop's body (its top-level ops and edges), port map and back edges
    graph: IrGraph | None = None
    port_map: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    back_edges: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class IrSequence:
    """One LSTMSequence/GRUSequence op as the file holds it: ``cell``, sizes (``batch`` and
    ``seq_len`` where the file fixes them), its attributes, its weights in the op's own layout
    and stored type (``weights``: ``W``, ``R``, ``B``), and ``stored`` (float32, float16:
    the type of the .bin's constants). ``problem``: why it cannot be read (weights computed by
    other ops)."""

    path: str
    name: str
    op_type: str
    cell: str
    direction: str
    hidden_size: int
    input_size: int
    batch: int | None
    seq_len: int | None
    attributes: dict[str, str]
    weights: dict[str, np.ndarray] = field(repr=False)
    stored: str = "float32"
    problem: str | None = None
    op_id: str = ""
    # a TensorIterator's: its input index of X, H, C, output index of Y, Ho, Co, the axes
    loop: dict[str, int] = field(default_factory=dict)

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    @property
    def linear_before_reset(self) -> bool:
        return self.attributes.get("linear_before_reset", "false").lower() in ("true", "1")


@dataclass
class IrGraph:
    """The top-level ops of an IR and its edges: ``edges[(to_id, to_port)] = (from_id,
    from_port)``."""

    ops: dict[str, IrOp]
    edges: dict[tuple[str, int], tuple[str, int]]

    def source(self, op: IrOp, port: int) -> IrOp | None:
        edge = self.edges.get((op.id, port))
        return None if edge is None else self.ops.get(edge[0])


def parse_xml(path: Path, max_bytes: int | None) -> IrGraph:
    """The top-level ops and edges of the IR's .xml, parsed with expat: a DOCTYPE (the only
    place entities can be declared) is refused, and so is a file over the memory limit."""
    check_file(path)
    size = path.stat().st_size
    check_size(path, size, max_bytes, "is")
    graph = IrGraph({}, {})
    stack: list[str] = []
    # the op whose attributes and ports are being read, the depth of its <layer>, and the
    # top-level op around it (a loop's body op is read into the loop's graph)
    state: dict[str, Any] = {"op": None, "base": 0, "top": None, "port": None, "dim": False}

    def refuse(*_: object) -> None:
        raise WeightsError("the .xml declares a DOCTYPE or entities: refused (an OpenVINO IR "
                           "has none; they can expand without bound or read other files)",
                           file=path)

    def start(tag: str, attrs: dict[str, str]) -> None:
        stack.append(tag)
        depth = len(stack)
        top = state["top"]
        if tag == "layer" and depth == 3 and stack[:2] == ["net", "layers"]:
            state.update(op=_layer(path, graph, attrs), base=3, top=None)
            state["top"] = state["op"]
        elif tag == "edge" and depth == 3 and stack[:2] == ["net", "edges"]:
            _edge(path, graph, attrs)
        elif isinstance(top, IrOp) and depth > 3:
            if "body" in stack and tag == "layer":
                top.body.append(attrs.get("type", ""))
            if stack[3:5] == ["body", "layers"] and tag == "layer" and depth == 6:
                top.graph = top.graph or IrGraph({}, {})
                state.update(op=_layer(path, top.graph, attrs), base=6)
            elif stack[3:5] == ["body", "edges"] and tag == "edge" and depth == 6:
                top.graph = top.graph or IrGraph({}, {})
                _edge(path, top.graph, attrs)
            elif depth == 5 and stack[3] == "port_map":
                top.port_map.append((tag, dict(attrs)))
            elif depth == 5 and stack[3] == "back_edges" and tag == "edge":
                top.back_edges.append(dict(attrs))
            else:
                _detail(path, state, stack, tag, attrs)

    def end(tag: str) -> None:
        stack.pop()
        if tag == "layer" and len(stack) == 2:
            state.update(op=None, top=None, base=0)
        elif tag == "layer" and len(stack) == 5 and state["base"] == 6:
            state.update(op=state["top"], base=3)
        state["dim"] = False

    def text(data: str) -> None:
        op, port = state["op"], state["port"]
        if state["dim"] and isinstance(op, IrOp) and isinstance(port, int) and data.strip():
            d = data.strip()
            op.inputs[port].append(None if d in ("-1", "?") else _int(path, d, "a dim"))

    parser = expat.ParserCreate()
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        with path.open("rb") as f:
            parser.ParseFile(f)
    except expat.ExpatError as exc:
        raise WeightsError(f"not a readable OpenVINO IR .xml ({exc})", file=path) from None
    if not graph.ops:
        raise WeightsError("not an OpenVINO IR: no <net><layers><layer> elements", file=path)
    return graph


def _layer(path: Path, graph: IrGraph, attrs: dict[str, str]) -> IrOp:
    op = IrOp(attrs.get("id", ""), attrs.get("name", ""), attrs.get("type", ""),
              attrs.get("version", ""))
    if op.id in graph.ops:
        raise WeightsError(f"two layers with id {op.id!r}", file=path)
    graph.ops[op.id] = op
    return op


def _edge(path: Path, graph: IrGraph, attrs: dict[str, str]) -> None:
    to = (attrs.get("to-layer", ""), _int(path, attrs.get("to-port"), "an edge's port"))
    graph.edges[to] = (attrs.get("from-layer", ""),
                       _int(path, attrs.get("from-port"), "an edge's port"))


def _detail(path: Path, state: dict[str, Any], stack: list[str], tag: str,
            attrs: dict[str, str]) -> None:
    """An attribute, input port or dim of the op being read (its <layer> at ``base``)."""
    op, base = state["op"], state["base"]
    if not isinstance(op, IrOp):
        return
    rel = len(stack) - base
    if rel == 1 and tag == "data":
        op.data = dict(attrs)
    elif rel == 2 and stack[base] == "input" and tag == "port":
        port = _int(path, attrs.get("id"), "a port id")
        op.inputs[port] = []
        state["port"] = port
    elif rel == 2 and stack[base] == "output" and tag == "port":
        op.outputs.append(_int(path, attrs.get("id"), "a port id"))
    elif rel == 3 and stack[base] == "input" and tag == "dim":
        state["dim"] = True


def _int(path: Path, value: str | None, what: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise WeightsError(f"{what} {str(value)[:40]!r} is not an integer", file=path) from None


def read_sequences(path: Path, max_bytes: int | None) -> list[IrSequence]:
    """Every LSTMSequence/GRUSequence op of the IR ``path`` (with its .bin), and every
    TensorIterator stepping one cell over time (:mod:`harness.readers.openvino_loop`), in file
    order. A file whose TensorIterator/Loop bodies hold cells that are not read and with no
    layer read is refused naming them; so is one with no recurrent op at all."""
    graph = parse_xml(path, max_bytes)
    bin_path = path.with_suffix(".bin")
    found = []
    loops = []
    for op in graph.ops.values():
        cell = SEQUENCE_OPS.get(op.type)
        if cell is not None:
            found.append(_sequence(path, bin_path, graph, op, cell, max_bytes))
        elif op.type in LOOP_OPS and any(t in CELL_OPS for t in op.body):
            got = recognize(op)
            if isinstance(got, str):
                loops.append(got)
            else:
                found.append(_loop_sequence(path, bin_path, op, got, max_bytes))
    if not found:
        if loops:
            raise WeightsError("no LSTMSequence or GRUSequence op; recurrent cells inside a "
                               f"loop are not read: {'; '.join(loops[:4])}", file=path)
        types = sorted({op.type for op in graph.ops.values()})
        raise WeightsError(f"no recurrent layer (LSTMSequence or GRUSequence op) in the IR "
                           f"(its ops: {', '.join(types[:12])})", file=path)
    return found


def _sequence(path: Path, bin_path: Path, graph: IrGraph, op: IrOp, cell: str,
              max_bytes: int | None) -> IrSequence:
    where = f"{op.type} {op.name!r}"
    try:
        hidden = int(op.data.get("hidden_size", ""))
    except ValueError:
        raise WeightsError(f"{where}: hidden_size {op.data.get('hidden_size')!r} is not an "
                           "integer", file=path) from None
    direction = op.data.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise WeightsError(f"{where}: direction {direction!r}; expected forward, reverse or "
                           "bidirectional", file=path)
    x = op.inputs.get(0, [])
    if len(x) != 3 or x[2] is None:
        raise WeightsError(f"{where}: X has dims {x}; expected [batch, seq, input] with the "
                           "input size fixed", file=path)
    weights, stored, problem = {}, set(), None
    for name, port in WEIGHT_PORTS[cell].items():
        got = _constant(path, bin_path, graph, op, port, name, max_bytes)
        if isinstance(got, str):
            problem = problem or got
            continue
        weights[name], fmt = got
        stored.add(fmt)
    seq = IrSequence(f"{op.name}", op.name, op.type, cell, direction, hidden, int(x[2]),
                     x[0] or None, x[1] or None, dict(op.data), weights,
                     min(stored, key=list(STORED.values()).index) if stored else "float32",
                     problem, op.id)
    if problem is None:
        _check_shapes(path, seq, where)
    return seq


def _check_shapes(path: Path, seq: IrSequence, where: str) -> None:
    hidden, gates = seq.hidden_size, len(cell_named(seq.cell).gates)
    lbr = len(cell_named(seq.cell).separate_biases(seq.linear_before_reset))
    dirs = seq.num_directions
    want = {"W": (dirs, gates * hidden, seq.input_size), "R": (dirs, gates * hidden, hidden),
            "B": (dirs, (gates + lbr) * hidden)}
    for name, shape in want.items():
        if seq.weights[name].shape != shape:
            raise WeightsError(f"{where}: {name} is shaped {list(seq.weights[name].shape)}; "
                               f"expected {list(shape)}", file=path)


def _loop_sequence(path: Path, bin_path: Path, op: IrOp, loop: LoopCell,
                   max_bytes: int | None) -> IrSequence:
    """The TensorIterator ``op`` stepping ``loop``'s cell over time as one layer: the cell's
    attributes and W, R, B constants given a leading direction axis (the sequence op's layout,
    so that :func:`onnx_native` maps its gates), the sizes from the loop's X."""
    cell_op, where = loop.cell_op, f"{loop.cell_op.type} in TensorIterator {op.name!r}"
    try:
        hidden = int(cell_op.data.get("hidden_size", ""))
    except ValueError:
        raise WeightsError(f"{where}: hidden_size {cell_op.data.get('hidden_size')!r} is not "
                           "an integer", file=path) from None
    x = op.inputs.get(loop.roles["X"], [])
    if len(x) != 3 or x[2] is None:
        raise WeightsError(f"{where}: X has dims {x}; expected 3 with the input size last and "
                           "fixed", file=path)
    weights, stored, problem = {}, set(), None
    for name in ("W", "R", "B"):
        got = _constant(path, bin_path, op.graph, cell_op, CELL_PORTS[loop.cell][name], name,
                        max_bytes)
        if isinstance(got, str):
            problem = problem or got
            continue
        weights[name], fmt = got[0][None], got[1]
        stored.add(fmt)
    seq = IrSequence(op.name, op.name, op.type, loop.cell, loop.direction, hidden, int(x[2]),
                     x[1 - loop.x_axis] or None, x[loop.x_axis] or None, dict(cell_op.data),
                     weights,
                     min(stored, key=list(STORED.values()).index) if stored else "float32",
                     problem, op.id, dict(loop.roles, x_axis=loop.x_axis))
    if problem is None:
        _check_shapes(path, seq, where)
    return seq


def _constant(path: Path, bin_path: Path, graph: IrGraph, op: IrOp, port: int, name: str,
              max_bytes: int | None) -> tuple[np.ndarray, str] | str:
    """The values of the ``Const`` feeding ``op``'s ``port`` (through Converts), or why it
    cannot be read."""
    src = graph.source(op, port)
    seen = 0
    while src is not None and src.type == "Convert" and seen < 8:
        src, seen = graph.source(src, 0), seen + 1
    where = f"{op.type} {op.name!r}"
    if src is None:
        return f"{where}: its {name} input has no source"
    if src.type != "Const":
        return (f"{where}: its {name} is computed by {src.type} {src.name!r}, not a constant "
                "(not read)")
    d = src.data
    elem = d.get("element_type", "")
    if elem not in ELEMENT_TYPES:
        return f"{where}: its {name} constant holds {elem!r} values (not read)"
    try:
        shape = tuple(int(s) for s in d.get("shape", "").split(",") if s.strip())
        offset, size = int(d.get("offset", "")), int(d.get("size", ""))
    except ValueError:
        raise WeightsError(f"constant {src.name!r}: shape, offset or size is not an integer "
                           f"({d.get('shape')!r}, {d.get('offset')!r}, {d.get('size')!r})",
                           file=path) from None
    itemsize = 2 if elem in ("f16", "bf16") else 4 if elem == "f32" else 8
    if offset < 0 or size != math.prod(shape) * itemsize:
        raise WeightsError(f"constant {src.name!r}: size {size} at offset {offset} does not "
                           f"hold {elem} {list(shape)}", file=path)
    check_file(bin_path)
    total = bin_path.stat().st_size
    if offset + size > total:
        raise WeightsError(f"constant {src.name!r}: bytes {offset}..{offset + size} lie past "
                           f"the end of {bin_path.name} ({total} bytes)", file=path)
    check_size(path, size, max_bytes, f"constant {src.name!r} holds")
    with bin_path.open("rb") as f:
        f.seek(offset)
        raw = f.read(size)
    if elem == "bf16":
        values = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        values = np.frombuffer(raw, np.dtype(ELEMENT_TYPES[elem]).newbyteorder("<"))
    return values.reshape(shape).copy(), STORED[elem]


def onnx_native(seq: IrSequence) -> dict[str, np.ndarray]:
    """The op's ``W``, ``R``, ``B`` as an ONNX node's (float64): blocks in ONNX's gate order,
    ``B`` = [Wb | Rb] with OpenVINO's summed biases in ``Wb`` and zeros in ``Rb`` (a GRU with
    linear_before_reset keeps h's two biases apart, as OpenVINO does)."""
    H, cell = seq.hidden_size, seq.cell
    order = [OPENVINO_ORDER[cell].index(g) for g in ONNX_ORDER[cell]]

    def reorder(a: np.ndarray) -> np.ndarray:
        blocks = [a[:, k * H:(k + 1) * H] for k in order]
        return np.concatenate(blocks, axis=1).astype(np.float64)

    W, R = reorder(seq.weights["W"]), reorder(seq.weights["R"])
    b = np.asarray(seq.weights["B"], dtype=np.float64)
    gates = len(order)
    if cell_named(cell).separate_biases(seq.linear_before_reset):  # a GRU's n gate: apart
        wb, rb = b[:, :3 * H], np.zeros_like(b[:, :3 * H])
        rb[:, 2 * H:] = b[:, 3 * H:]
    else:
        wb, rb = reorder(b[:, :gates * H]), np.zeros((b.shape[0], gates * H))
    return {"W": W, "R": R, "B": np.concatenate([wb, rb], axis=1)}


def fields_of(seq: IrSequence) -> dict:
    """The case fields of one sequence op: cell, sizes, direction, clip, linear_before_reset,
    and the batch and steps where the file fixes them. Activations other than the default
    (sigmoid, tanh, tanh) are refused."""
    fields: dict = {"cell": seq.cell, "input_size": seq.input_size,
                    "hidden_size": seq.hidden_size, "num_layers": 1,
                    "direction": seq.direction}
    clip = float(seq.attributes.get("clip", "0") or 0)
    if clip:
        fields["gate_clip"] = clip
    kind = cell_named(seq.cell)
    if kind.reads("reset_after"):
        fields["reset_after"] = seq.linear_before_reset
    acts = [a.strip() for a in seq.attributes.get("activations", "").split(",") if a.strip()]
    # f, g and, where a cell state is squashed into h, h (LSTMSequence's three; GRU's two)
    default = ["sigmoid", "tanh"] + (["tanh"] if kind.has_cell_state else [])
    if acts and acts != default:
        raise WeightsError(f"{seq.op_type} {seq.name!r}: activations {acts} are not read "
                           f"(expected {default})")
    if seq.batch:
        fields["batch"] = seq.batch
    if seq.seq_len:
        fields["seq_len"] = seq.seq_len
    return fields
