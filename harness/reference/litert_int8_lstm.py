"""An integer reference of LiteRT's full-integer LSTM: the 8x8->16 kernel of
``UNIDIRECTIONAL_SEQUENCE_LSTM`` (int8 activations and weights, int16 gate pre-activations and
cell state), written in NumPy integer arithmetic from TFLite's kernel source
(``tensorflow/lite/kernels/lstm_eval.cc``: ``LstmStepInteger8x8_16``,
``CalculateLstmGateInteger8x8_16``, ``UpdateLstmCellInteger``,
``CalculateLstmOutputInteger8x8_16``; ``internal/reference/portable_tensor_utils.cc``; the
scales and biases of ``unidirectional_sequence_lstm.cc``: ``PopulateQuantizedLstmParams8x8_16``
and ``PopulatePrecomputedZPTimesWeightsWithBias``). Fixed-point arithmetic:
:mod:`harness.reference.fixed_point`.

It reads the grids and integers the converted ``.tflite`` file declares (:func:`lstm_ops`) and
computes what the kernel computes, step by step; :func:`run_model` runs the graphs the LiteRT
adapters convert (``QUANTIZE``, ``REVERSE_V2``, the LSTM ops, ``CONCATENATION``,
``DEQUANTIZE``) and returns every tensor, so that a kernel can be compared with it to the bit,
per tensor and step.

One step, for each gate ``k`` of i, f, g, o (``x`` the int8 input, ``h`` the int8 hidden state,
``c`` the int16 cell state on the power-of-two scale 2^``cell_exponent``)::

    z_k = sat16( sat16( MBQM(W_k x + bW_k, mW_k) ) + MBQM(R_k h + bR_k, mR_k) )   Q3.12
    i, f, o = logistic(z_i), logistic(z_f), logistic(z_o)                         Q0.15
    g = tanh(z_g)                                                                 Q0.15
    c = sat16( RDBPOT(f c, 15) + RDBPOT(i g, 30 + cell_exponent) ), clipped to ±cell_clip
    h = sat8( MBQM(o tanh(c), m_hidden) + zp_hidden )   tanh on Q(15 + cell_exponent)

``MBQM(a, m)``: the int32 accumulator times a quantized multiplier (an int32 and a shift, from
an effective scale computed in float32 as the kernel does); ``RDBPOT``: a rounding right shift;
``sat16``/``sat8``: saturation. The biases fold the zero points in, as the kernel does once at
preparation: ``bW_k = bias_k - zp_x ΣW_k`` (row sums), ``bR_k = -zp_h ΣR_k``. The gate
pre-activations are on Q3.12 (2^-12) because a layer without layer normalization has no
intermediate grids of its own. ``h`` is written on the hidden intermediate's grid
(``effective_hidden_scale_intermediate``) and read back, at the next step, with the h-state
input's zero point and scale: where the converter declares two grids there, the kernel (and this
reference) reads the integers on the second.

The kernel ignores the op's ``fused_activation_function``: its cell and output activations are
tanh. Projection, layer normalization, peepholes and CIFG (no input gate) are left out (no
bundled case exercises them): a model that declares them is refused, naming what.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import HarnessError
from harness.frameworks import litert_flatbuffer
from harness.reference.fixed_point import (
    Ints,
    ints,
    logistic,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturate,
    tanh,
    wrap,
)

GATES = ("i", "f", "g", "o")
# the fused LSTM op's inputs (TFLite schema): input weights, recurrent weights, biases per gate
W_INPUTS, R_INPUTS, BIAS_INPUTS = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
PEEPHOLE_INPUTS, PROJECTION_INPUTS, LAYER_NORM_INPUTS = (9, 10, 11), (16, 17), (20, 21, 22, 23)
GATE_EXPONENT = -12  # Q3.12: the gate pre-activations' scale without layer normalization
# ops run_model models, beside the LSTM
GRAPH_OPS = ("QUANTIZE", "REVERSE_V2", "CONCATENATION", "DEQUANTIZE",
             litert_flatbuffer.FUSED_LSTM)


class NotModelled(HarnessError):
    """The model declares something the integer reference does not model (projection, layer
    normalization, an op outside :data:`GRAPH_OPS`, ...): the message names it."""


@dataclass(frozen=True)
class Multiplier:
    """An effective scale as the kernel applies it: ``real`` (float32, computed as the kernel
    computes it) and its quantized ``multiplier`` / ``shift``."""

    real: float
    multiplier: int
    shift: int

    @classmethod
    def of(cls, real: np.float32) -> Multiplier:
        return cls(float(real), *quantize_multiplier(float(real)))

    def apply(self, accumulator: Ints) -> Ints:
        return multiply_by_quantized_multiplier(accumulator, self.multiplier, self.shift)


@dataclass
class IntegerLstm:
    """One ``UNIDIRECTIONAL_SEQUENCE_LSTM`` op's integers and grids, as the file stores them,
    and what the kernel derives from them at preparation.

    Shapes: ``W[k]`` int8 [H, I], ``R[k]`` int8 [H, H], ``bias[k]`` int32 [H] (k in i, f, g, o);
    ``bW[k]``, ``bR[k]`` int32 [H]: the biases with the zero points folded in."""

    op: int  # the op's index in the subgraph
    x_scale: float
    x_zero_point: int
    h_scale: float  # the h-state input's grid: how h is read back
    h_zero_point: int
    hidden_scale: float  # the hidden intermediate's grid: how h is written
    hidden_zero_point: int
    cell_exponent: int  # the cell state's scale is 2^cell_exponent
    cell_clip: int  # 0: none
    time_major: bool
    W: dict[str, Ints]
    R: dict[str, Ints]
    bias: dict[str, Ints]
    W_scale: dict[str, float]
    R_scale: dict[str, float]
    bW: dict[str, Ints] = field(init=False)
    bR: dict[str, Ints] = field(init=False)
    mW: dict[str, Multiplier] = field(init=False)
    mR: dict[str, Multiplier] = field(init=False)
    m_hidden: Multiplier = field(init=False)

    def __post_init__(self) -> None:
        f32 = np.float32
        gate_scale = f32(2.0 ** GATE_EXPONENT)
        # float32 arithmetic, in the kernel's order: weight scale x input scale / gate scale
        self.mW = {k: Multiplier.of(f32(self.W_scale[k]) * f32(self.x_scale) / gate_scale)
                   for k in GATES}
        self.mR = {k: Multiplier.of(f32(self.R_scale[k]) * f32(self.h_scale) / gate_scale)
                   for k in GATES}
        # std::pow(2, -15) is a double: the quotient is taken in double, then stored as float
        self.m_hidden = Multiplier.of(f32(2.0 ** -15 / float(f32(self.hidden_scale))
                                          * 2.0 ** -15))
        self.bW = {k: wrap(self.bias[k] - self.x_zero_point * self.W[k].sum(axis=1), 32)
                   for k in GATES}
        self.bR = {k: wrap(-self.h_zero_point * self.R[k].sum(axis=1), 32) for k in GATES}
        if not 0 <= 15 + self.cell_exponent <= 6:  # the kernel's tanh has 0..6 integer bits
            raise NotModelled(f"a cell state scale of 2^{self.cell_exponent}: the kernel's "
                              f"tanh takes 2^-15 .. 2^-9")

    @property
    def hidden_size(self) -> int:
        return self.W["i"].shape[0]

    def gate(self, k: str, x: Ints, h: Ints) -> Ints:
        """The gate's int16 pre-activation on Q3.12, [B, H], from int8 ``x`` [B, I] and ``h``
        [B, H]: each product accumulated in int32, scaled, and added with saturation."""
        z = saturate(self.mW[k].apply(wrap(x @ self.W[k].T + self.bW[k], 32)), 16)
        return saturate(z + self.mR[k].apply(wrap(h @ self.R[k].T + self.bR[k], 32)), 16)

    def step(self, x: Ints, h: Ints, c: Ints) -> dict[str, Ints]:
        """One step: ``x`` int8 [B, I], ``h`` int8 [B, H], ``c`` int16 [B, H] -> the gates'
        pre-activations ``z_i`` .. ``z_o`` and activations ``i`` .. ``o`` (int16), the new
        ``c`` (int16) and ``h`` (int8)."""
        z = {k: self.gate(k, x, h) for k in GATES}
        i, f, o = (logistic(z[k], 3) for k in ("i", "f", "o"))
        g = tanh(z["g"], 3)
        c = saturate(wrap(rounding_divide_by_pot(f * c, 15), 16)
                     + wrap(rounding_divide_by_pot(i * g, 30 + self.cell_exponent), 16), 16)
        if self.cell_clip > 0:
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        tanh_c = tanh(c, 15 + self.cell_exponent)
        h = saturate(self.m_hidden.apply(o * tanh_c) + self.hidden_zero_point, 8)
        return {**{f"z_{k}": z[k] for k in GATES}, "i": i, "f": f, "g": g, "o": o,
                "c": c, "h": h}

    def run(self, x: Ints, h0: Ints | None = None, c0: Ints | None = None
            ) -> dict[str, Ints]:
        """The op over a sequence: ``x`` int8 [B, T, I] ([T, B, I] for a time-major op) ->
        ``y`` int8 [B, T, H] (the op's output, as the kernel writes it) and every step's
        ``c`` [B, T, H], ``z_*`` and gates (int16). Initial states: the interpreter's reset
        values, ``h`` at the h-state's zero point (real 0) and ``c`` = 0, unless given."""
        x = ints(x)
        if self.time_major:
            x = x.transpose(1, 0, 2)
        B, T, _ = x.shape
        h = ints(h0) if h0 is not None else np.full((B, self.hidden_size), self.h_zero_point)
        c = ints(c0) if c0 is not None else np.zeros((B, self.hidden_size), dtype=np.int64)
        steps = []
        for t in range(T):
            s = self.step(x[:, t], h, c)
            h, c = s["h"], s["c"]
            steps.append(s)
        trace = {name: np.stack([s[name] for s in steps], axis=1) for name in steps[0]}
        trace["y"] = trace.pop("h")
        if self.time_major:
            trace = {name: a.transpose(1, 0, 2) for name, a in trace.items()}
        return trace


def _refuse_unmodelled(flat: litert_flatbuffer.Flat, n: int, op: litert_flatbuffer.Op) -> None:
    present = [i for i in op.inputs if i >= 0]
    what = [(PROJECTION_INPUTS, "a projection (inputs 16-17)"),
            (LAYER_NORM_INPUTS, "layer normalization (inputs 20-23)"),
            (PEEPHOLE_INPUTS, "peepholes (inputs 9-11)")]
    for indices, words in what:
        if any(len(op.inputs) > i and op.inputs[i] >= 0 for i in indices):
            raise NotModelled(f"op {n} {op.name} has {words}: the integer reference leaves it "
                              f"out (no bundled case exercises it)")
    if op.inputs[W_INPUTS[0]] < 0:
        raise NotModelled(f"op {n} {op.name} has no input gate (CIFG): the integer reference "
                          f"leaves it out (no bundled case exercises it)")
    kinds = {flat.tensor_type(op.inputs[0]), *(flat.tensor_type(op.inputs[i])
                                               for i in W_INPUTS + R_INPUTS)}
    if kinds != {"INT8"} or any(flat.tensor_type(op.inputs[i]) != "INT32" for i in BIAS_INPUTS):
        raise NotModelled(f"op {n} {op.name} is not the 8x8->16 integer kernel: its input and "
                          f"weights are {', '.join(sorted(kinds))}, its biases "
                          f"{flat.tensor_type(op.inputs[BIAS_INPUTS[0]])} (expected int8 and "
                          f"int32)")
    if len(op.intermediates) != 5:
        raise NotModelled(f"op {n} {op.name} has {len(op.intermediates)} intermediate tensors "
                          f"where the 8x8->16 kernel takes 5 (the 8x8->8 kernel is left out)")
    for i in present:
        q = flat.subgraph.tensors[i].quantization
        if q is not None and q.scale is not None and len(q.scale) > 1:
            raise NotModelled(f"op {n} {op.name}: tensor {i} is quantized per channel; the "
                              f"kernel reads one scale per tensor")


def lstm_ops(model: bytes) -> list[IntegerLstm]:
    """Every ``UNIDIRECTIONAL_SEQUENCE_LSTM`` op of the model's main subgraph, in execution
    order, with its integers and grids as stored; :class:`NotModelled` for one the reference
    does not model."""
    flat = litert_flatbuffer.read(model)
    found = []
    for n, op in enumerate(flat.ops):
        if op.name == litert_flatbuffer.FUSED_LSTM:
            found.append(_integer_lstm(flat, n, op))
    return found


def _grid(flat: litert_flatbuffer.Flat, index: int, what: str, n: int) -> tuple[float, int]:
    g = flat.grid(index)
    if g is None:
        raise NotModelled(f"op {n}: {what} (tensor {index}) declares no integer grid")
    return g.scale, g.zero_point


def _integer_lstm(flat: litert_flatbuffer.Flat, n: int, op: litert_flatbuffer.Op
                  ) -> IntegerLstm:
    _refuse_unmodelled(flat, n, op)
    x_scale, x_zp = _grid(flat, op.inputs[0], "the input", n)
    h_scale, h_zp = _grid(flat, op.inputs[litert_flatbuffer.H_STATE], "the h state", n)
    hidden_scale, hidden_zp = _grid(flat, op.intermediates[litert_flatbuffer.HIDDEN_INTERMEDIATE],
                                    "the hidden intermediate", n)
    c_scale, _ = _grid(flat, op.inputs[litert_flatbuffer.C_STATE], "the cell state", n)
    exponent = round(float(np.log2(c_scale)))
    if abs(np.log2(c_scale) - exponent) >= 1e-3:  # the kernel's CheckedLog2
        raise NotModelled(f"op {n}: the cell state's scale {c_scale:g} is not a power of two")
    options: Any = op.options
    clip = float(getattr(options, "cellClip", 0.0) or 0.0)
    if float(getattr(options, "projClip", 0.0) or 0.0) > 0:
        raise NotModelled(f"op {n} {op.name} clips a projection: projection is left out")
    # the kernel: static_cast<int16_t>(min(max(cell_clip / scale, -32768.0f), 32767.0f))
    cell_clip = int(np.clip(np.float32(clip) / np.float32(c_scale), -32768, 32767)) \
        if clip > 0 else 0

    def scale(i: int) -> float:
        return _grid(flat, i, f"input {i}", n)[0]

    return IntegerLstm(
        op=n, x_scale=x_scale, x_zero_point=x_zp, h_scale=h_scale, h_zero_point=h_zp,
        hidden_scale=hidden_scale, hidden_zero_point=hidden_zp, cell_exponent=exponent,
        cell_clip=cell_clip, time_major=bool(getattr(options, "timeMajor", False)),
        W={k: ints(flat.stored(op.inputs[i])) for k, i in zip(GATES, W_INPUTS, strict=True)},
        R={k: ints(flat.stored(op.inputs[i])) for k, i in zip(GATES, R_INPUTS, strict=True)},
        bias={k: ints(flat.stored(op.inputs[i])) for k, i in zip(GATES, BIAS_INPUTS,
                                                                  strict=True)},
        W_scale={k: scale(op.inputs[i]) for k, i in zip(GATES, W_INPUTS, strict=True)},
        R_scale={k: scale(op.inputs[i]) for k, i in zip(GATES, R_INPUTS, strict=True)})


def quantize(x: np.ndarray, scale: float, zero_point: int, bits: int = 8) -> Ints:
    """TFLite's reference ``QUANTIZE`` (``AffineQuantize``): ``round(x / scale) + zero_point``,
    the quotient in float32, rounded half away from zero, clamped to the integer range."""
    q = np.asarray(x, dtype=np.float32) / np.float32(scale)
    rounded = np.sign(q) * np.floor(np.abs(q) + np.float32(0.5))
    return saturate(ints(rounded) + zero_point, bits)


def dequantize(q: Ints, scale: float, zero_point: int) -> np.ndarray:
    """TFLite's reference ``DEQUANTIZE``: ``scale x (q - zero_point)`` in double, stored as
    float32."""
    return (float(np.float32(scale)) * (ints(q) - zero_point).astype(np.float64)
            ).astype(np.float32)


@dataclass
class ModelRun:
    """What :func:`run_model` computed: ``tensors``, every tensor an op wrote, by tensor index
    (integers as int64, floats as float32); ``traces``, each LSTM op's :meth:`IntegerLstm.run`,
    by op index; ``output``, the model's output."""

    tensors: dict[int, np.ndarray]
    traces: dict[int, dict[str, Ints]]
    output: np.ndarray


def run_model(model: bytes, x: np.ndarray) -> ModelRun:
    """Run the model's main subgraph on its float input ``x`` with this reference. Ops outside
    :data:`GRAPH_OPS` are refused (:class:`NotModelled`)."""
    flat = litert_flatbuffer.read(model)
    [model_input] = [int(i) for i in flat.subgraph.inputs]
    values: dict[int, np.ndarray] = {model_input: np.asarray(x, dtype=np.float32)}
    traces: dict[int, dict[str, Ints]] = {}
    lstms = {op.op: op for op in lstm_ops(model)}
    for n, op in enumerate(flat.ops):
        if op.name not in GRAPH_OPS:
            raise NotModelled(f"op {n} {op.name}: the integer reference models "
                              f"{', '.join(GRAPH_OPS)} only")
        out = op.outputs[0]
        if op.name == "QUANTIZE":
            scale, zp = _grid(flat, out, "QUANTIZE's output", n)
            values[out] = quantize(values[op.inputs[0]], scale, zp)
        elif op.name == "DEQUANTIZE":
            scale, zp = _grid(flat, op.inputs[0], "DEQUANTIZE's input", n)
            values[out] = dequantize(values[op.inputs[0]], scale, zp)
        elif op.name == "REVERSE_V2":  # copies bytes: the output's declared grid is not read
            axes = [int(a) for a in np.ravel(flat.stored(op.inputs[1]))]
            values[out] = np.flip(values[op.inputs[0]], axis=tuple(axes))
        elif op.name == "CONCATENATION":
            grids = {flat.grid(i) for i in [*op.inputs, out]}
            if len(grids) != 1:  # TFLite's int8 kernel requires one grid for all
                raise NotModelled(f"op {n} CONCATENATION of tensors on different grids")
            values[out] = np.concatenate([values[i] for i in op.inputs],
                                         axis=op.options.axis)
        else:
            trace = lstms[n].run(values[op.inputs[0]])
            values[out], traces[n] = trace["y"], trace
    [model_output] = [int(i) for i in flat.subgraph.outputs]
    return ModelRun(values, traces, values[model_output])
