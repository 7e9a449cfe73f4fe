"""Reading a converted ``.tflite`` model's ops, tensor types and quantization from its flatbuffer
(the generated schema LiteRT ships, ``ai_edge_litert.schema_py_generated``, else TensorFlow's
``tensorflow.lite.python.schema_py_generated``: the same schema, and LiteRT's imports in a
fraction of a second where TensorFlow's costs seconds), independently of the interpreter that
runs it: what a quantized adapter compares with (the weights as stored,
the grids the model declares) comes from the file, what it reports comes from the kernel.

The fused LSTM op's inputs (TFLite schema, ``UNIDIRECTIONAL_SEQUENCE_LSTM``): 0 the input,
1-4 the input weights of the gates input, forget, cell, output (canonical i, f, g, o), 5-8 the
recurrent weights, 9-11 peepholes, 12-15 the gate biases, 16-17 projection, 18 the hidden state
(its output grid), 19 the cell state, 20-23 layer norm.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.grids import DynamicActivation, Grid, LayerGrids, QuantizedModel
from harness.params import key
from harness.spec import Case

FUSED_LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"
GATE_INPUTS = {"W": (1, 2, 3, 4), "R": (5, 6, 7, 8), "bW": (12, 13, 14, 15)}
H_STATE, C_STATE = 18, 19
# the fused LSTM op's intermediate tensor whose grid the integer kernel writes h on (TFLite's
# ``effective_hidden_scale_intermediate``); the h-state input's grid is the one it reads h back on
HIDDEN_INTERMEDIATE = 4
# ops whose integer kernel copies its input's bytes without requantizing (measured for
# REVERSE_V2, TensorFlow 2.21: its output's bytes are its input's, reversed), so that an output
# grid other than the input's changes what the bytes mean
BYTE_COPYING = ("REVERSE_V2",)

# how TFLite's hybrid LSTM kernel (int8 weights, float activations) quantizes the input and
# h_{t-1} of each step before their products, each batch row on its own grid (lstm_eval.cc,
# tensor_utils::BatchQuantizeFloats): int8 symmetric -127..127, or affine -128..127 where the
# op's option ``asymmetric_quantize_inputs`` is set
HYBRID_SYMMETRIC = DynamicActivation(qmin=-127, qmax=127, symmetric=True, rows=1, tflite=True)
HYBRID_ASYMMETRIC = DynamicActivation(qmin=-128, qmax=127, rows=1, tflite=True)

# TFLite TensorType -> (NumPy type, the integer range of its grid)
INTEGER_TYPES = {"INT8": (np.int8, -128, 127), "UINT8": (np.uint8, 0, 255),
                 "INT16": (np.int16, -32768, 32767), "INT32": (np.int32, -2**31, 2**31 - 1)}
NUMPY_TYPES = {"FLOAT32": np.float32, **{k: v[0] for k, v in INTEGER_TYPES.items()}}


@dataclass
class Op:
    name: str
    inputs: list[int]
    outputs: list[int]
    intermediates: list[int] = field(default_factory=list)
    options: Any = None  # the op's builtin options (schema object), None where it has none


@dataclass
class Flat:
    """One subgraph's ops and tensors, with the model's buffers."""

    model: Any
    raw: bytes  # the file: a buffer may be stored past the flatbuffer (offset, size)
    subgraph: Any
    ops: list[Op]
    op_names: dict[int, str]
    type_names: dict[int, str]

    def tensor_type(self, index: int) -> str:
        return self.type_names[self.subgraph.tensors[index].type]

    def grid(self, index: int) -> Grid | None:
        """The grid of an integer tensor (per-tensor quantization), None for a float one."""
        t = self.subgraph.tensors[index]
        kind = self.tensor_type(index)
        q = t.quantization
        if kind not in INTEGER_TYPES or q is None or q.scale is None or len(q.scale) == 0:
            return None
        _, lo, hi = INTEGER_TYPES[kind]
        return Grid(float(q.scale[0]), int(q.zeroPoint[0]) if q.zeroPoint is not None else 0,
                    lo, hi)

    def stored(self, index: int) -> np.ndarray:
        """A constant tensor's values exactly as stored, in its own type (int8, int32, ...)."""
        t = self.subgraph.tensors[index]
        buffer = self.model.buffers[t.buffer]
        data = (bytes(bytearray(buffer.data)) if buffer.data is not None
                else self.raw[buffer.offset:buffer.offset + buffer.size])
        raw = np.frombuffer(data, dtype=NUMPY_TYPES[self.tensor_type(index)])
        return raw.reshape(tuple(t.shape))

    def value(self, index: int) -> np.ndarray:
        """A constant tensor as stored, dequantized (per tensor or per channel) to float64."""
        t = self.subgraph.tensors[index]
        a = self.stored(index).astype(np.float64)
        q = t.quantization
        if self.tensor_type(index) not in INTEGER_TYPES or q is None or q.scale is None \
                or len(q.scale) == 0:
            return a
        scale = np.asarray(q.scale, dtype=np.float64)
        zero = np.asarray(q.zeroPoint if q.zeroPoint is not None else [0], dtype=np.float64)
        if scale.size > 1:  # per channel, along the quantized dimension
            shape = [1] * a.ndim
            shape[q.quantizedDimension] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (a - zero) * scale


def _schema() -> Any:
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:  # TensorFlow without LiteRT: its own copy of the schema
        from tensorflow.lite.python import schema_py_generated as schema
    return schema


def read(model: bytes, subgraph: int = 0) -> Flat:
    schema = _schema()
    m = schema.ModelT.InitFromPackedBuf(model, 0)
    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    sg = m.subgraphs[subgraph]
    ops = []
    for op in sg.operators:
        code = m.operatorCodes[op.opcodeIndex]
        ops.append(Op(op_names[max(code.builtinCode, code.deprecatedBuiltinCode)],
                      [int(i) for i in op.inputs], [int(i) for i in op.outputs],
                      [int(i) for i in op.intermediates] if op.intermediates is not None
                      else [], op.builtinOptions))
    return Flat(m, model, sg, ops, op_names, type_names)


def subgraph_count(model: bytes) -> int:
    return len(_schema().ModelT.InitFromPackedBuf(model, 0).subgraphs)


def hybrid_activations(op: Op) -> DynamicActivation:
    """How the hybrid kernel of a fused LSTM op with int8 weights and a float input quantizes
    its activations at run time: by its option ``asymmetric_quantize_inputs``."""
    asymmetric = bool(getattr(op.options, "asymmetricQuantizeInputs", False))
    return HYBRID_ASYMMETRIC if asymmetric else HYBRID_SYMMETRIC


def integer_recurrent_tensors(model: bytes) -> list[str]:
    """``op:tensor(type)`` of every integer tensor an op of the recurrence reads: the fused LSTM
    ops' inputs, and every op of a loop's body (the subgraphs past the first)."""
    found = []
    main = read(model)
    for op in main.ops:
        if op.name == FUSED_LSTM:
            found += [f"{op.name}:{i}({main.tensor_type(i)})" for i in op.inputs
                      if i >= 0 and main.tensor_type(i) in INTEGER_TYPES]
    for s in range(1, subgraph_count(model)):
        body = read(model, s)
        found += [f"{op.name}:{i}({body.tensor_type(i)})" for op in body.ops for i in op.inputs
                  if i >= 0 and body.tensor_type(i) in INTEGER_TYPES]
    return found


def reversed_by(flat: Flat, op: Op) -> Op | None:
    """The ``REVERSE_V2`` op whose output is ``op``'s input, else None: where a converted
    bidirectional layer's fused LSTM op reads its input reversed in time, it runs the reverse
    direction (the converter writes each direction as an op of its own)."""
    made_by = next((o for o in flat.ops if op.inputs[0] in o.outputs), None)
    return made_by if made_by is not None and made_by.name == "REVERSE_V2" else None


def quantized_model(case: Case, model: bytes, scheme: str) -> QuantizedModel:
    """The weights as stored (dequantized, canonical keys) and the grids the model declares,
    read from its fused LSTM ops: one per layer and direction, in execution order, layer by
    layer; an op whose input is a ``REVERSE_V2``'s output runs the reverse direction."""
    flat = read(model)
    lstms = [op for op in flat.ops if op.name == FUSED_LSTM]
    D = case.num_directions
    if len(lstms) != case.num_layers * D:
        raise ValueError(f"{len(lstms)} {FUSED_LSTM} ops for {case.num_layers} layer(s) x {D} "
                         f"direction(s)")
    weights: dict[str, np.ndarray] = {}
    grids: dict[str, LayerGrids] = {}
    H = case.hidden_size
    for n, op in enumerate(lstms):
        layer = n // D
        d = 1 if reversed_by(flat, op) is not None else 0
        for prefix, indices in GATE_INPUTS.items():
            for gate, i in zip(case.gates, indices, strict=True):
                weights[key(layer, d, f"{prefix}_{gate}")] = flat.value(op.inputs[i])
        for gate in case.gates:
            weights[key(layer, d, f"bR_{gate}")] = np.zeros(H)
        # the stored bias holds the forget bias (layout keras folds it in); the reference adds
        # the case's own
        weights[key(layer, d, "bW_f")] = weights[key(layer, d, "bW_f")] - case.forget_bias
        grids[f"{layer}/{d}"] = LayerGrids(x=flat.grid(op.inputs[0]), h=flat.grid(
            op.inputs[H_STATE]), c=flat.grid(op.inputs[C_STATE]))
    out = flat.subgraph.outputs[0]
    producer = next((op for op in flat.ops if out in op.outputs), None)
    output = (flat.grid(producer.inputs[0]) if producer is not None
              and producer.name == "DEQUANTIZE" else None)
    activations = None
    if scheme == "dynamic":
        kinds = {hybrid_activations(op) for op in lstms}
        if len(kinds) > 1:
            raise ValueError(f"the {FUSED_LSTM} ops quantize their inputs both symmetric and "
                             f"asymmetric (asymmetric_quantize_inputs)")
        [activations] = kinds
    return QuantizedModel(scheme, weights, grids, output, activations)


def _same(a: Grid | None, b: Grid | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.zero_point == b.zero_point and abs(a.scale - b.scale) <= 1e-6 * abs(b.scale)


def _words(g: Grid | None) -> str:
    return "float" if g is None else f"scale {g.scale:.5g} zero point {g.zero_point}"


def grid_conflicts(model: bytes, ops: Collection[int] | None = None) -> list[str]:
    """Where the converted model declares two grids for one set of integers, at ops that do not
    requantize between them, in words: a fused LSTM whose hidden state is written on one grid
    (its hidden-scale intermediate's), read back on another (its h-state input's) or read
    downstream on a third (its output's; the integer kernel writes h's integers to the output
    unchanged), and a byte-copying op (:data:`BYTE_COPYING`) whose output declares a grid
    other than its input's. Empty for a float model or consistent grids. ``ops``: only those
    ops (by index in the main subgraph; default: all)."""
    flat = read(model)
    found = []
    for n, op in enumerate(flat.ops):
        if ops is not None and n not in ops:
            continue
        if op.name == FUSED_LSTM and len(op.intermediates) > HIDDEN_INTERMEDIATE:
            written = flat.grid(op.intermediates[HIDDEN_INTERMEDIATE])
            read_back = flat.grid(op.inputs[H_STATE])
            out = flat.grid(op.outputs[0])
            if written is None or (_same(written, read_back) and _same(written, out)):
                continue
            found.append(f"op {n} {op.name} writes h on {_words(written)}, reads it back on "
                         f"{_words(read_back)}, and its output declares {_words(out)}")
        elif op.name in BYTE_COPYING and op.outputs:
            a, b = flat.grid(op.inputs[0]), flat.grid(op.outputs[0])
            if a is not None and not _same(a, b):
                found.append(f"op {n} {op.name} copies bytes of {_words(a)} into an output "
                             f"that declares {_words(b)}")
    return found


def grid_conflict_words(model: bytes, ops: Collection[int] | None = None) -> str:
    """:func:`grid_conflicts` as a reason's words ("" where there are none): what the LiteRT
    adapters and compare's outputs verdict of a shipped ``.tflite`` both say."""
    conflicts = grid_conflicts(model, ops)
    if not conflicts:
        return ""
    return (f"the converter declared two grids for one set of integers where no op "
            f"requantizes: {'; '.join(conflicts)}")
