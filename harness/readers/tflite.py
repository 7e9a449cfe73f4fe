"""The recurrent layers of a ``.tflite`` file (a path or its bytes), for ``compare`` and for a
case's ``.tflite`` weights and shipped file (:mod:`harness.readers.deployed`): each
``UNIDIRECTIONAL_SEQUENCE_LSTM`` and ``BIDIRECTIONAL_SEQUENCE_LSTM`` op of the main subgraph,
float or quantized (int8, 16x8: integer weights with their scale and zero point), dequantized
to canonical parameters (docs/equations.md), its sizes (batch and sequence length included)
from the file's tensors.

The fused ops' inputs (TFLite schema; gate order input, forget, cell, output = canonical i, f,
g, o): unidirectional 0 the input, 1-4 input-to-gate weights [H, I], 5-8 recurrent-to-gate
weights [H, P or H], 9-11 peepholes (cell-to-input, -forget, -output), 12-15 gate biases, 16-17
projection weights and bias, 18-19 the h and c states, 20-23 layer-norm coefficients.
Bidirectional: 1-17 forward, 18-34 backward in the same order, 35-38 the states. A gate's one
bias is canonical ``bW``; ``bR`` is zero. A lone op reading its input through a ``REVERSE_V2``
on the time axis (Keras ``go_backwards``:
:func:`harness.readers.tflite_reversals.reversal_of`) is direction reverse.

The converter emits a ``WHILE`` loop, not a fused op, for a Keras GRU and for an LSTM traced
with its final states as outputs. A float Keras ``GRU(reset_after=True)``'s loop is read as a
GRU layer where its body's cell is recognized (:mod:`harness.readers.tflite_while`); any other
loop is named as not readable here, with its loop body's ops
(:class:`~harness.errors.WeightsError`, exit 2), as is any other recurrent form (peepholes,
projection, layer normalization, CIFG).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import WeightsError
from harness.frameworks import litert_flatbuffer as fb
from harness.grids import LayerGrids, QuantizedModel
from harness.params import Canonical, key
from harness.readers.tflite_reversals import UNI, bidirectional_pairs, reversal_of
from harness.spec import Case

SUFFIXES = (".tflite",)
BIDI = "BIDIRECTIONAL_SEQUENCE_LSTM"
GATES = ("i", "f", "g", "o")
SCHEMA_GATES = {"i": "input", "f": "forget", "g": "cell", "o": "output"}
# per direction: where each kind of tensor starts among the op's inputs (one per gate)
UNI_INPUTS = {"W": 1, "R": 5, "bW": 12, "peephole": 9, "projection": 16, "state": 18,
              "layer_norm": 20}
BIDI_OFFSET = 17  # the backward direction's inputs follow the forward's
BIDI_STATES = (35, 37)  # each direction's h state (its c state follows)
# the clip the converter writes into every Keras LSTM's fused op (measured, TensorFlow 2.21)
CONVERTER_CELL_CLIP = 10.0


@dataclass(frozen=True)
class WeightGrid:
    """A quantized weight tensor's grid, per element: ``scale`` and ``zero_point`` broadcast
    to the tensor's shape, ``qmax`` its integer range's top; ``tensor`` the file's words for
    it (``input_to_forget_weights, tensor 11``)."""

    scale: np.ndarray
    zero_point: np.ndarray
    qmax: int
    tensor: str


@dataclass(frozen=True)
class TfliteOp:
    """Where a layer sits in its ``.tflite``: the ``model`` bytes, the op's index and name,
    ``scheme`` (float, int8, 16x8), the grids of its quantized weights by canonical block
    (``forward/W_f``), and the file's weights and activation grids as the integer-aware
    reference reads them (``quantized``; None for a float file)."""

    model: bytes = field(repr=False)
    index: int
    op: str
    scheme: str
    grids: dict[str, WeightGrid] = field(default_factory=dict, repr=False)
    quantized: QuantizedModel | None = field(default=None, repr=False)
    # the op reads the model's input (directly or through one QUANTIZE) and the model's
    # output is its y (directly or through one DEQUANTIZE): the file runs as the layer
    whole: bool = False
    # each canonical block's tensor among the main subgraph's (a fused op's; a loop's are in
    # its body): the same in the op cut out (harness.frameworks.litert_run.cut)
    indices: dict[str, int] = field(default_factory=dict, repr=False)
    # a layer of several ops, a Keras Bidirectional's (tflite_reversals.bidirectional_pairs):
    # forward, REVERSE_V2, backward, REVERSE_V2, CONCATENATION, ``index`` the first; empty: one op
    ops: tuple[int, ...] = ()
    # a lone op reading its input through a REVERSE_V2 on the time axis (Keras go_backwards,
    # tflite_reversals.reversal_of): that REVERSE_V2, then the one reversing its y back where
    # there is one; the layer is then direction reverse
    reversed_in: tuple[int, ...] = ()

    def feed(self, x: np.ndarray) -> np.ndarray:
        """What the run model takes for the layer's input ``x`` [B, T, I]: ``x`` itself, or
        for a reversed op cut out alone (its REVERSE_V2 left behind) ``x`` reversed in time."""
        return np.ascontiguousarray(np.flip(x, axis=1)) if self.reversed_in and not self.whole \
            else x

    def in_time_order(self, y: np.ndarray) -> np.ndarray:
        """The run model's output as the layer's y in input time order (the harness's reverse
        direction: docs/cases.md): a reversed op's y is in its reading order unless the file
        reverses it back (and runs as it is)."""
        flip = self.reversed_in and (not self.whole or len(self.reversed_in) == 1)
        return np.ascontiguousarray(np.flip(y, axis=1)) if flip else y


def is_tflite(source: Any) -> bool:
    """A ``.tflite`` path, or bytes holding a TFLite flatbuffer (identifier ``TFL3``)."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source[4:8]) == b"TFL3"
    if isinstance(source, str | Path):
        return Path(source).suffix.lower() in SUFFIXES
    return False


def read_tflite(source: Any, role: str, limit: int) -> list[dict[str, Any]]:
    """The fields of each :class:`~harness.models.layers.Layer` of a ``.tflite`` path or its
    bytes (``tflite``: where it sits, :class:`TfliteOp`); errors name the file."""
    from harness.readers.limits import check_file, check_size

    if isinstance(source, bytes | bytearray | memoryview):
        data, label = bytes(source), "the .tflite bytes"
        if len(data) > limit:
            raise WeightsError(f"{len(data)} bytes exceed the memory limit {limit}", file=label)
    else:
        path = Path(source)
        check_file(path)
        check_size(path, path.stat().st_size, limit, "is")
        data, label = path.read_bytes(), str(path)
    if data[4:8] != b"TFL3":
        raise WeightsError("not a TFLite flatbuffer (no TFL3 identifier at byte 4)", file=label)
    try:
        flat = fb.read(data)
        count = fb.subgraph_count(data)
    except Exception as exc:  # a damaged flatbuffer: the schema's own words
        raise WeightsError(f"the flatbuffer cannot be read ({type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0][:200]})", file=label) from None
    pairs = bidirectional_pairs(flat, label)
    paired = {n for ops in pairs.values() for n in ops}
    layers = [_pair_layer(flat, pairs[n], data, label, role) if n in pairs
              else _layer(flat, n, op, data, label, role) for n, op in enumerate(flat.ops)
              if op.name in (UNI, BIDI) and (n in pairs or n not in paired)]
    if not layers:
        layers = [layer for n, op in enumerate(flat.ops) if op.name == "WHILE"
                  for layer in [_gru_loop(flat, n, op, data, label, role)] if layer]
    if not layers:
        raise WeightsError(_no_layer(flat, data, count), file=label)
    return layers


def _no_layer(flat: fb.Flat, data: bytes, count: int) -> str:
    ops = [op.name for op in flat.ops]
    if "WHILE" in ops and count > 1:
        body = []
        for s in range(1, count):
            body += [op.name for op in fb.read(data, s).ops]
        names = ", ".join(dict.fromkeys(body))
        return (f"a WHILE loop whose body holds {names}: not a recurrent form rnn-harness "
                f"reads (it reads the fused UNIDIRECTIONAL_SEQUENCE_LSTM and "
                f"BIDIRECTIONAL_SEQUENCE_LSTM ops)")
    return (f"no recurrent layer: no UNIDIRECTIONAL_SEQUENCE_LSTM or "
            f"BIDIRECTIONAL_SEQUENCE_LSTM op among its ops ({', '.join(dict.fromkeys(ops))})")


def _weight_grid(flat: fb.Flat, i: int, words: str) -> WeightGrid | None:
    t = flat.subgraph.tensors[i]
    kind = flat.tensor_type(i)
    q = t.quantization
    if kind not in fb.INTEGER_TYPES or q is None or q.scale is None or len(q.scale) == 0:
        return None
    shape = tuple(int(s) for s in t.shape)
    scale = np.asarray(q.scale, dtype=np.float64)
    zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else [0], dtype=np.float64)
    if scale.size > 1:
        bshape = [1] * len(shape)
        bshape[q.quantizedDimension] = -1
        scale, zero = scale.reshape(bshape), zero.reshape(bshape)
    return WeightGrid(np.broadcast_to(scale, shape), np.broadcast_to(zero, shape),
                      fb.INTEGER_TYPES[kind][2], f"{words}, tensor {i}")


def _case(role: str, fields: dict[str, Any], label: str) -> Case:
    try:
        return Case(name=role, **fields)
    except ValueError as exc:
        raise WeightsError(f"the sizes read make no case ({exc})".splitlines()[0],
                           file=label) from None


def _layer(flat: fb.Flat, n: int, op: fb.Op, data: bytes, label: str, role: str
           ) -> dict[str, Any]:
    where = f"op {n} {op.name}"
    D = 2 if op.name == BIDI else 1
    at = _inputs_at(op, D)
    _refuse_forms(at, D, where, label)
    case = _lstm_case(flat, op, at, where, label, role)
    reversal = reversal_of(flat, n, op, label) if op.name == UNI else ()
    first = 1 if reversal else 0  # a reversed op's weights and grids are the reverse direction's
    if reversal:
        case = case.model_copy(update={"direction": "reverse"})
    weights = _weights(flat, at, D, case, where, label, first)
    tensors, grids = weights.tensors, weights.grids
    scheme = ("float" if not grids else "16x8" if flat.tensor_type(op.inputs[0]) == "INT16"
              else "int8" if flat.grid(op.inputs[0]) is not None else "dynamic")
    quantized = _quantized(flat, op, at, D, scheme, tensors, first) if grids else None
    float32 = all(np.array_equal(v.astype(np.float32), v) for v in tensors.values())
    whole = _whole(flat, op)
    place = f"the {op.name} op {n} of the main subgraph"
    if reversal:
        last = flat.ops[reversal[-1]] if len(reversal) == 2 else op
        whole = _whole_between(flat, flat.ops[reversal[0]].inputs[0], last.outputs[0])
        place += (f", reading its input through the REVERSE_V2 op {reversal[0]} on the time "
                  f"axis (a Keras go_backwards layer: direction reverse"
                  + (f"; its y reversed back by the REVERSE_V2 op {reversal[1]})"
                     if len(reversal) == 2 else "; its y in reading order)"))
    return {"source": label, "name": where, "path": where, "case": case,
            "layout": "canonical", "canonical": Canonical(tensors), "native": dict(tensors),
            "dtype": "float32" if grids or float32 else "float64", "adapter": None,
            "where": place, "file_names": weights.file_names,
            "tflite": TfliteOp(data, n, op.name, scheme, grids, quantized, whole,
                               weights.indices, reversed_in=reversal)}


def _inputs_at(op: fb.Op, D: int) -> Any:
    """``at(d, what, g)``: the tensor index of direction ``d``'s ``what`` (``W``, ``R``,
    ``bW``, ...) for gate ``g`` among the op's inputs; -1 where the op has none."""
    starts = [0] if D == 1 else [0, BIDI_OFFSET]

    def at(d: int, what: str, g: int = 0) -> int:
        k = UNI_INPUTS[what] + starts[d] + g
        return op.inputs[k] if k < len(op.inputs) else -1

    return at


def _refuse_forms(at: Any, D: int, where: str, label: str) -> None:
    """Peepholes, projection, layer normalization and CIFG: named, not read."""
    present = set()
    for d in range(D):
        for what, count, words in (("peephole", 3, "peepholes (cell_to_* weights)"),
                                   ("projection", 2, "a projection"),
                                   ("layer_norm", 4 if D == 1 else 0, "layer normalization")):
            if any(at(d, what, g) >= 0 for g in range(count)):
                present.add(words)
    if present or at(0, "W") < 0:
        what = sorted(present) or ["no input gate (CIFG)"]
        raise WeightsError(f"{where} has {', '.join(what)}: not a form rnn-harness reads",
                           file=label)


def _lstm_case(flat: fb.Flat, op: fb.Op, at: Any, where: str, label: str, role: str
               ) -> Case:
    """The op's case: sizes from its input and W_i, batch and steps where the file fixes them,
    a cell clip other than the converter's own."""
    x = flat.subgraph.tensors[op.inputs[0]]
    options = op.options
    time_major = bool(getattr(options, "timeMajor", False))
    shape = [int(s) for s in x.shape]
    if len(shape) != 3:
        raise WeightsError(f"{where}: its input is shaped {shape}, expected 3 dimensions",
                           file=label)
    T, B = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    H, I = (int(s) for s in flat.subgraph.tensors[at(0, "W")].shape)
    clip = float(getattr(options, "cellClip", 0.0) or 0.0)
    fields: dict[str, Any] = {"cell": "lstm", "input_size": I, "hidden_size": H,
                              "direction": "bidirectional" if op.name == BIDI else "forward"}
    if B > 0:
        fields["batch"] = B
    if T > 0:
        fields["seq_len"] = T
    if clip > 0 and clip != CONVERTER_CELL_CLIP:
        fields["cell_clip"] = clip
    return _case(role, fields, label)


@dataclass
class _Weights:
    """An op's weights read: canonical ``tensors``, the quantized ones' ``grids``, the file's
    words for each (``file_names``) and its tensor index (``indices``)."""

    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    grids: dict[str, WeightGrid] = field(default_factory=dict)
    file_names: dict[str, str] = field(default_factory=dict)
    indices: dict[str, int] = field(default_factory=dict)


def _weights(flat: fb.Flat, at: Any, D: int, case: Case, where: str, label: str,
             first: int = 0) -> _Weights:
    """``first``: the canonical direction of the op's first (1: a reversed op's, reverse)."""
    H, I = case.hidden_size, case.input_size
    out = _Weights()
    for d in range(D):
        side = ("forward " if d == 0 else "backward ") if D == 2 else ""
        for prefix, words in (("W", "input_to_{}_weights"), ("R", "recurrent_to_{}_weights"),
                              ("bW", "{}_gate_bias")):
            for g, gate in enumerate(GATES):
                i = at(d, prefix, g)
                k = key(0, d + first, f"{prefix}_{gate}")
                value = flat.value(i)
                want = (H, I) if prefix == "W" else (H, H) if prefix == "R" else (H,)
                if value.shape != want:
                    raise WeightsError(f"{where}: {words.format(SCHEMA_GATES[gate])} is shaped "
                                       f"{list(value.shape)}, expected {list(want)}", file=label)
                out.tensors[k] = value
                name = side + words.format(SCHEMA_GATES[gate])
                out.file_names[k] = f"{name} (tensor {i})"
                out.indices[k] = i
                grid = _weight_grid(flat, i, name)
                if grid is not None:
                    out.grids[k.split("/", 1)[1]] = grid
        for g in GATES:
            out.tensors[key(0, d + first, f"bR_{g}")] = np.zeros(H)
    return out


def _quantized(flat: fb.Flat, op: fb.Op, at: Any, D: int, scheme: str,
               tensors: dict[str, np.ndarray], first: int = 0) -> QuantizedModel:
    """The file's weights and activation grids as the integer-aware reference reads them."""
    # each direction's h and c states sit side by side among the op's inputs, not among the
    # file's tensors: their tensor numbers are whatever the converter gave them
    states = [UNI_INPUTS["state"]] if D == 1 else list(BIDI_STATES)
    layer_grids = {f"0/{d + first}": LayerGrids(x=flat.grid(op.inputs[0]),
                                                h=flat.grid(op.inputs[s]),
                                                c=flat.grid(op.inputs[s + 1]))
                   for d, s in enumerate(states)}
    out = flat.subgraph.outputs[0]
    producer = next((o for o in flat.ops if out in o.outputs), None)
    output = (flat.grid(producer.inputs[0]) if producer is not None
              and producer.name == "DEQUANTIZE" else flat.grid(out))
    return QuantizedModel(scheme if scheme != "16x8" else "int8",
                          {k: v.copy() for k, v in tensors.items()}, layer_grids, output,
                          fb.hybrid_activations(op) if scheme == "dynamic" else None)


def _pair_layer(flat: fb.Flat, ops: tuple[int, ...], data: bytes, label: str, role: str
                ) -> dict[str, Any]:
    """The bidirectional layer of a pair of fused LSTM ops
    (:func:`~harness.readers.tflite_reversals.bidirectional_pairs`):
    each op's weights its direction's, its grids its direction's."""
    f, _, b, _, j = ops
    fwd, bwd = flat.ops[f], flat.ops[b]
    where = f"ops {f} and {b} {UNI}"
    ats = [_inputs_at(fwd, 1), _inputs_at(bwd, 1)]
    for n, one in ((f, ats[0]), (b, ats[1])):
        _refuse_forms(one, 1, f"op {n} {UNI}", label)

    def at(d: int, what: str, g: int = 0) -> int:
        return ats[d](0, what, g)

    case = _lstm_case(flat, fwd, ats[0], where, label, role).model_copy(
        update={"direction": "bidirectional"})
    weights = _weights(flat, at, 2, case, where, label)
    tensors, grids = weights.tensors, weights.grids
    scheme = ("float" if not grids else "16x8" if flat.tensor_type(fwd.inputs[0]) == "INT16"
              else "int8" if flat.grid(fwd.inputs[0]) is not None else "dynamic")
    quantized = None
    if grids:  # each op's grids its direction's
        q = [_quantized(flat, o, one, 1, scheme, tensors) for o, one in zip((fwd, bwd), ats,
                                                                              strict=True)]
        quantized = replace(q[0], grids={"0/0": q[0].grids["0/0"], "0/1": q[1].grids["0/0"]})
    float32 = all(np.array_equal(v.astype(np.float32), v) for v in tensors.values())
    whole = _whole_between(flat, fwd.inputs[0], flat.ops[j].outputs[0])
    return {"source": label, "name": where, "path": where, "case": case,
            "layout": "canonical", "canonical": Canonical(tensors), "native": dict(tensors),
            "dtype": "float32" if grids or float32 else "float64", "adapter": None,
            "where": f"the {UNI} ops {f} (forward) and {b} (backward: between the REVERSE_V2 "
                     f"ops {ops[1]} and {ops[3]}) joined by the CONCATENATION op {j} of the "
                     f"main subgraph (a Keras Bidirectional layer)",
            "file_names": weights.file_names,
            "tflite": TfliteOp(data, f, UNI, scheme, grids, quantized, whole, weights.indices,
                               ops)}


def _gru_loop(flat: fb.Flat, n: int, op: fb.Op, data: bytes, label: str, role: str
              ) -> dict[str, Any] | None:
    """The GRU layer of a WHILE loop whose body is a Keras GRU's cell, else None."""
    from harness.readers.tflite_while import read_gru_body

    body = int(getattr(op.options, "bodySubgraphIndex", -1))
    cell = read_gru_body(data, body) if body > 0 else None
    if cell is None:
        return None
    H, I = cell["H"], cell["I"]
    ins, outs = list(flat.subgraph.inputs), list(flat.subgraph.outputs)
    x_shape = [int(s) for s in flat.subgraph.tensors[ins[0]].shape] if len(ins) == 1 else []
    y_shape = [int(s) for s in flat.subgraph.tensors[outs[0]].shape] if len(outs) == 1 else []
    # the model is the layer: its one input [B, T, I], its one output y [B, T, H], and the
    # loop and the layout TRANSPOSEs around it its only ops
    whole = (len(x_shape) == 3 and x_shape[2] == I and y_shape == [*x_shape[:2], H]
             and sorted(o.name for o in flat.ops) == ["TRANSPOSE", "TRANSPOSE", "WHILE"])
    fields: dict[str, Any] = {"cell": "gru", "input_size": I, "hidden_size": H,
                              "direction": "forward", "reset_after": True}
    if whole and x_shape[0] > 0:
        fields["batch"] = x_shape[0]
    if whole and x_shape[1] > 0:
        fields["seq_len"] = x_shape[1]
    case = _case(role, fields, label)
    tensors: dict[str, np.ndarray] = {}
    file_names: dict[str, str] = {}
    for kind in ("W", "R", "bW", "bR"):
        for g in case.gates:
            k = key(0, 0, f"{kind}_{g}")
            tensors[k] = np.asarray(cell[kind][g], dtype=np.float64)
            file_names[k] = cell["tensors"][f"{kind}_{g}"]
    name = f"op {n} WHILE"
    return {"source": label, "name": name, "path": name, "case": case, "layout": "canonical",
            "canonical": Canonical(tensors), "native": dict(tensors), "dtype": "float32",
            "adapter": None,
            "where": f"the WHILE loop op {n} of the main subgraph (a Keras GRU's cell, "
                     f"reset after, in its body subgraph {body})",
            "file_names": file_names,
            "tflite": TfliteOp(data, n, "WHILE", "float", {}, None, whole)}


def _whole(flat: fb.Flat, op: fb.Op) -> bool:
    """Whether the model's one input feeds the op (directly or through one QUANTIZE) and its
    one output is the op's y (directly or through one DEQUANTIZE)."""
    return _whole_between(flat, op.inputs[0], op.outputs[0])


def _whole_between(flat: fb.Flat, x: int, layer_y: int) -> bool:
    """Whether the model's one input is ``x`` (or its one QUANTIZE's input) and its one output
    ``layer_y`` (or its one DEQUANTIZE's output)."""
    made_by = {o: p for p in flat.ops for o in p.outputs}
    ins, outs = list(flat.subgraph.inputs), list(flat.subgraph.outputs)
    if len(ins) != 1 or len(outs) != 1:
        return False
    feeder = made_by.get(x)
    fed = x == ins[0] or (feeder is not None and feeder.name == "QUANTIZE"
                          and feeder.inputs[0] == ins[0])
    y = outs[0]
    writer = made_by.get(y)
    read = y == layer_y or (writer is not None and writer.name == "DEQUANTIZE"
                            and writer.inputs[0] == layer_y)
    return fed and read


def describe(layer: Any) -> str:
    """The layer in words, for its reason: the op (or ops) and its scheme."""
    t = layer.tflite
    if t is not None and t.ops:
        return f"{t.op} ops {t.index} and {t.ops[2]}, bidirectional ({t.scheme})"
    if t is not None and t.reversed_in:
        return f"{t.op} op {t.index}, reverse ({t.scheme})"
    return f"{t.op} op {t.index} ({t.scheme})" if t is not None else layer.path
