"""Hand-made ``.tflite`` flatbuffers for compare's cheap tests, built with LiteRT's own schema
(no converter, no TensorFlow): one ``UNIDIRECTIONAL_SEQUENCE_LSTM`` op, float or with int8
weights on given grids, a ``WHILE`` loop whose body holds given ops, and one whose body is a
Keras GRU's cell. And the real converter's files, made by a script in a child process
(:func:`converted_in_child`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import flatbuffers
import numpy as np

schema = __import__("pytest").importorskip("ai_edge_litert.schema_py_generated")


def _tensor(m, shape, kind, data=None, scale=None, name="t", variable=False):
    t = schema.TensorT()
    t.shape, t.type, t.name, t.isVariable = list(shape), kind, name.encode(), variable
    b = schema.BufferT()
    if data is not None:
        b.data = list(np.ascontiguousarray(data).tobytes())
    m.buffers.append(b)
    t.buffer = len(m.buffers) - 1
    if scale is not None:
        q = schema.QuantizationParametersT()
        q.scale, q.zeroPoint = [float(scale)], [0]
        t.quantization = q
    m.subgraphs[0].tensors.append(t)
    return len(m.subgraphs[0].tensors) - 1


def _model(ops):
    m = schema.ModelT()
    m.version, m.buffers = 3, [schema.BufferT()]
    sg = schema.SubGraphT()
    sg.tensors, sg.operators = [], []
    m.subgraphs = [sg]
    m.operatorCodes = []
    for name in ops:
        c = schema.OperatorCodeT()
        code = getattr(schema.BuiltinOperator, name)
        c.builtinCode, c.deprecatedBuiltinCode, c.version = code, min(code, 127), 1
        m.operatorCodes.append(c)
    return m


def _pack(m) -> bytes:
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def weights(seed: int = 0, H: int = 4, I: int = 3) -> dict[str, np.ndarray]:
    """An LSTM's weights in TFLite's gate order (i, f, g, o), uniform in [-0.5, 0.5): W_g
    [H, I], R_g [H, H], b_g [H], as :func:`lstm` takes them."""
    rng = np.random.default_rng(seed)
    return {**{f"W_{g}": rng.uniform(-.5, .5, (H, I)) for g in "ifgo"},
            **{f"R_{g}": rng.uniform(-.5, .5, (H, H)) for g in "ifgo"},
            **{f"b_{g}": rng.uniform(-.5, .5, H) for g in "ifgo"}}


def lstm(weights: dict[str, np.ndarray], B: int = 2, T: int = 5,
         scales: dict[str, float] | None = None, declared: dict[str, float] | None = None,
         lead: str | None = None, asymmetric: bool = False) -> bytes:
    """One fused LSTM op on x [B, T, I]; ``weights``: W_i..W_o [H, I], R_i..R_o [H, H],
    b_i..b_o [H] (TFLite's gate order). ``scales``: int8 weights on these grids (symmetric),
    each declared on its ``declared`` scale where given (a file whose scale was edited).
    ``lead``: a one-input elementwise op (TANH) between the model's input and the LSTM, which
    then sits inside a larger model. ``asymmetric``: the op's ``asymmetric_quantize_inputs``
    (how the hybrid kernel of int8 weights quantizes its float activations)."""
    m = _model(["UNIDIRECTIONAL_SEQUENCE_LSTM", *([lead] if lead else [])])
    H, I = weights["W_i"].shape
    F32, I8 = schema.TensorType.FLOAT32, schema.TensorType.INT8
    x = model_input = _tensor(m, (B, T, I), F32, name="x")
    ops = []
    if lead:
        first = schema.OperatorT()
        x = _tensor(m, (B, T, I), F32, name=lead.lower())
        first.opcodeIndex, first.inputs, first.outputs = 1, [model_input], [x]
        ops.append(first)
    ins = [x]
    for name in [f"{p}_{g}" for p in "WR" for g in "ifgo"]:
        w = weights[name]
        if scales and name in scales:
            q = np.clip(np.rint(w / scales[name]), -127, 127).astype(np.int8)
            scale = (declared or {}).get(name, scales[name])
            ins.append(_tensor(m, w.shape, I8, q, scale, name=name))
        else:
            ins.append(_tensor(m, w.shape, F32, w.astype(np.float32), name=name))
    ins += [-1, -1, -1]
    ins += [_tensor(m, (H,), F32, weights[f"b_{g}"].astype(np.float32), name=f"b_{g}")
            for g in "ifgo"]
    ins += [-1, -1]
    ins += [_tensor(m, (B, H), F32, name="h", variable=True),
            _tensor(m, (B, H), F32, name="c", variable=True)]
    ins += [-1, -1, -1, -1]
    y = _tensor(m, (B, T, H), F32, name="y")
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, ins, [y]
    o = schema.UnidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction, o.timeMajor = schema.ActivationFunctionType.TANH, False
    o.asymmetricQuantizeInputs = asymmetric
    op.builtinOptionsType = schema.BuiltinOptions.UnidirectionalSequenceLSTMOptions
    op.builtinOptions = o
    sg = m.subgraphs[0]
    sg.operators, sg.inputs, sg.outputs = [*ops, op], [model_input], [y]
    return _pack(m)


def while_loop(body_ops: list[str]) -> bytes:
    """A main subgraph holding one WHILE op, its body subgraph holding ``body_ops`` (not a
    model that runs: what the reader sees of the converter's loop form)."""
    m = _model(["WHILE", *body_ops])
    F32 = schema.TensorType.FLOAT32
    x = _tensor(m, (2, 5, 3), F32, name="x")
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [x], [x]
    m.subgraphs[0].operators = [op]
    body = schema.SubGraphT()
    body.tensors, body.operators = [schema.TensorT()], []
    body.tensors[0].shape, body.tensors[0].type, body.tensors[0].buffer = [1], F32, 0
    for k in range(len(body_ops)):
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = k + 1, [0], [0]
        body.operators.append(o)
    m.subgraphs.append(body)
    return _pack(m)


GRU_BODY_OPS = ("GATHER", "FULLY_CONNECTED", "SPLIT", "ADD", "LOGISTIC", "MUL", "SUB", "TANH")


def gru_loop(Wx: np.ndarray, Wh: np.ndarray, bx: np.ndarray, bh: np.ndarray,
             candidate: str = "TANH") -> bytes:
    """A main subgraph holding one WHILE op whose body subgraph computes a Keras GRU cell
    (reset after) as the converter writes it: FULLY_CONNECTED ``Wx`` [3H, I] (bias ``bx``) on
    the step's input and ``Wh`` [3H, H] (bias ``bh``) on h, each SPLIT into z, r, n blocks
    (Keras's order), then z, r, n and h' (harness/readers/tflite_while.py). ``candidate``: n's
    activation (TANH; another makes a body that is not the cell). Not a model that runs: what
    the reader sees of the loop."""
    m = _model(["WHILE", *GRU_BODY_OPS])
    code = {name: k + 1 for k, name in enumerate(GRU_BODY_OPS)}
    code[candidate] = code.get(candidate) or _add_code(m, candidate)
    F32, I32 = schema.TensorType.FLOAT32, schema.TensorType.INT32
    H3, I = Wx.shape
    H, B, T = H3 // 3, 2, 5
    x = _tensor(m, (B, T, I), F32, name="x")
    y = _tensor(m, (B, T, H), F32, name="y")
    loop = schema.OperatorT()
    loop.opcodeIndex, loop.inputs, loop.outputs = 0, [x], [y]
    o = schema.WhileOptionsT()
    o.condSubgraphIndex, o.bodySubgraphIndex = 1, 1
    loop.builtinOptionsType, loop.builtinOptions = schema.BuiltinOptions.WhileOptions, o
    sg = m.subgraphs[0]
    sg.operators, sg.inputs, sg.outputs = [loop], [x], [y]
    body = schema.SubGraphT()
    body.tensors, body.operators = [], []
    m.subgraphs.append(body)

    def t(shape, data=None, kind=F32):
        m.subgraphs, saved = [body], m.subgraphs
        try:
            return _tensor(m, shape, kind, data)
        finally:
            m.subgraphs = saved

    def op(name, ins, n_out=1, shape=(B, H)):
        outs = [t(shape) for _ in range(n_out)]
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code[name], list(ins), outs
        body.operators.append(o)
        return outs if n_out > 1 else outs[0]

    step, h, xs = t(()), t((B, H)), t((T, B, I))
    axis, one = t((), np.int32(1), I32), t((), np.float32(1))
    x_t = op("GATHER", [xs, step], shape=(B, I))
    wx, wh = t(Wx.shape, Wx.astype(np.float32)), t(Wh.shape, Wh.astype(np.float32))
    cx, ch = t(bx.shape, bx.astype(np.float32)), t(bh.shape, bh.astype(np.float32))
    hz, hr, hn = op("SPLIT", [axis, op("FULLY_CONNECTED", [h, wh, ch], shape=(B, H3))], 3)
    xz, xr, xn = op("SPLIT", [axis, op("FULLY_CONNECTED", [x_t, wx, cx], shape=(B, H3))], 3)
    z = op("LOGISTIC", [op("ADD", [xz, hz])])
    r = op("LOGISTIC", [op("ADD", [xr, hr])])
    n = op(candidate, [op("ADD", [xn, op("MUL", [r, hn])])])
    h_new = op("ADD", [op("MUL", [z, h]), op("MUL", [op("SUB", [one, z]), n])])
    body.inputs, body.outputs = [step, h, xs], [h_new]
    return _pack(m)


def _add_code(m, name: str) -> int:
    c = schema.OperatorCodeT()
    c.builtinCode = getattr(schema.BuiltinOperator, name)
    c.deprecatedBuiltinCode, c.version = min(c.builtinCode, 127), 1
    m.operatorCodes.append(c)
    return len(m.operatorCodes) - 1


def converted_in_child(script: str, folder: Path) -> float:
    """Run the converter ``script`` (it writes into the folder given as its argument) in a
    process of its own, since the converter can die in the harness's (_litert_convert); the
    seconds it took."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, str(folder)], check=True, capture_output=True)
    return time.perf_counter() - start


def _lstm_op(m, x: int, weights: dict[str, np.ndarray], B: int, T: int):
    """A float fused LSTM op (opcode 0) on tensor ``x``, added to ``m``'s tensors; the op."""
    H = weights["W_i"].shape[0]
    F32 = schema.TensorType.FLOAT32
    ins = [x] + [_tensor(m, weights[f"{p}_{g}"].shape, F32,
                         weights[f"{p}_{g}"].astype(np.float32), name=f"{p}_{g}")
                 for p in "WR" for g in "ifgo"]
    ins += [-1, -1, -1]
    ins += [_tensor(m, (H,), F32, weights[f"b_{g}"].astype(np.float32), name=f"b_{g}")
            for g in "ifgo"]
    ins += [-1, -1, _tensor(m, (B, H), F32, name="h", variable=True),
            _tensor(m, (B, H), F32, name="c", variable=True), -1, -1, -1, -1]
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, ins, [_tensor(m, (B, T, H), F32, name="y")]
    o = schema.UnidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction, o.timeMajor = schema.ActivationFunctionType.TANH, False
    o.cellClip = 10.0
    op.builtinOptionsType = schema.BuiltinOptions.UnidirectionalSequenceLSTMOptions
    op.builtinOptions = o
    return op


def bidirectional(forward: dict[str, np.ndarray], backward: dict[str, np.ndarray],
                  B: int = 2, T: int = 5, merge: str = "CONCATENATION", lead: bool = False
                  ) -> bytes:
    """A Keras Bidirectional(LSTM) as the converter writes it (TensorFlow 2.21, measured):
    REVERSE_V2 of x on the time axis, the backward fused LSTM on it, REVERSE_V2 of its y, the
    forward fused LSTM on x, ``merge`` (CONCATENATION on the last axis, forward first; ADD:
    Keras's merge_mode sum) of the two. Weights as :func:`lstm`'s. ``lead``: a TANH between
    the model's input and the layer, which then sits inside a larger model."""
    m = _model(["UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2", merge, "TANH"])
    H, I = forward["W_i"].shape
    F32, I32 = schema.TensorType.FLOAT32, schema.TensorType.INT32
    x = model_input = _tensor(m, (B, T, I), F32, name="x")
    if lead:
        x = _tensor(m, (B, T, I), F32, name="tanh")
    axis = _tensor(m, (1,), I32, np.array([1], np.int32), name="axis")

    def op(code, ins, out):
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code, ins, [out]
        return o

    x_rev = _tensor(m, (B, T, I), F32, name="x_reversed")
    bwd = _lstm_op(m, x_rev, backward, B, T)
    y_back = _tensor(m, (B, T, H), F32, name="y_backward")
    fwd = _lstm_op(m, x, forward, B, T)
    joined = (B, T, 2 * H) if merge == "CONCATENATION" else (B, T, H)
    y = _tensor(m, joined, F32, name="y")
    join = op(2, [fwd.outputs[0], y_back], y)
    if merge == "CONCATENATION":
        o = schema.ConcatenationOptionsT()
        o.axis = 2
        join.builtinOptionsType, join.builtinOptions = schema.BuiltinOptions.ConcatenationOptions, o
    sg = m.subgraphs[0]
    sg.operators = [op(1, [x, axis], x_rev), bwd, op(1, [bwd.outputs[0], axis], y_back), fwd,
                    join]
    if lead:
        sg.operators.insert(0, op(3, [model_input], x))
    sg.inputs, sg.outputs = [model_input], [y]
    return _pack(m)


def go_backwards(weights: dict[str, np.ndarray], B: int = 2, T: int = 5, back: bool = False,
                 lead: bool = False, axis: int = 1) -> bytes:
    """A Keras ``LSTM(go_backwards=True)`` as the converter writes it: REVERSE_V2 of x on
    ``axis`` (the time axis: 1), the fused LSTM on it, its y in reading order, or reversed back
    by another REVERSE_V2 (``back``). Weights as :func:`lstm`'s. ``lead``: a TANH between the
    model's input and the layer, which then sits inside a larger model."""
    m = _model(["UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2", "TANH"])
    H, I = weights["W_i"].shape
    F32, I32 = schema.TensorType.FLOAT32, schema.TensorType.INT32
    x = model_input = _tensor(m, (B, T, I), F32, name="x")
    if lead:
        x = _tensor(m, (B, T, I), F32, name="tanh")
    axes = _tensor(m, (1,), I32, np.array([axis], np.int32), name="axis")

    def op(code, ins, out):
        o = schema.OperatorT()
        o.opcodeIndex, o.inputs, o.outputs = code, ins, [out]
        return o

    x_rev = _tensor(m, (B, T, I), F32, name="x_reversed")
    lstm_op = _lstm_op(m, x_rev, weights, B, T)
    ops = [op(1, [x, axes], x_rev), lstm_op]
    y = lstm_op.outputs[0]
    if back:
        y = _tensor(m, (B, T, H), F32, name="y_back")
        ops.append(op(1, [lstm_op.outputs[0], axes], y))
    if lead:
        ops.insert(0, op(2, [model_input], x))
    sg = m.subgraphs[0]
    sg.operators, sg.inputs, sg.outputs = ops, [model_input], [y]
    return _pack(m)
