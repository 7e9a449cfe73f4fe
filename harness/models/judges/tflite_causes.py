"""What explains a shipped int8 ``.tflite`` LSTM's distance from an ideal quantization, computed
from the file and the run, for compare's outputs verdict (:mod:`harness.models.judges.shipped`):
the cell state's grid against what LiteRT's integer LSTM kernel computes.

The 8x8->16 kernel (TFLite's ``unidirectional_sequence_lstm.cc``,
``PopulateQuantizedLstmParams8x8_16``; ``lstm_eval.cc``) keeps c in int16 on a power-of-two
scale 2^k (``CheckedLog2`` of the c-state tensor's scale), so c saturates at ±32767·2^k, and
takes tanh(c) on Q(15 + k): its ``ApplyTanh`` dispatches 0 to 6 integer bits and writes nothing
for any other, so only 2^-15 .. 2^-9 are computed (:mod:`harness.reference.litert_int8_lstm`
refuses the others). A converter that calibrated c on a small range declares 2^-16 or finer,
and c saturates on inputs that drive it further. The reach of c is the float64 reference's on
the file's own weights and the run's inputs; the integer reference, where it models the file,
says how many of its int16 c values sit at the ends of their range."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from harness.data import Inputs
    from harness.readers.tflite import TfliteOp
    from harness.spec import Case

# the cell scales 2^k whose tanh(c) the kernel computes: Q(15 + k) with 0 to 6 integer bits
KERNEL_CELL_EXPONENTS = range(-15, -8)
INT16_MAX = 32767


def cell_state_causes(op: TfliteOp, case: Case, inputs: Inputs) -> list[str]:
    """Words on each direction's c state whose grid explains a difference: a scale that is
    not a power of two or outside :data:`KERNEL_CELL_EXPONENTS`, a range that c passes on
    ``inputs`` (``case``: the shipped layer's, at the inputs' batch and steps). Empty for a
    file without an int16 c grid, or where none applies."""
    if op.quantized is None or not any(g.c is not None for g in op.quantized.grids.values()):
        return []
    from harness.params import Canonical
    from harness.reference.functions import FLOAT64
    from harness.reference.layers import forward

    tapes: list = []
    forward(case, Canonical(op.quantized.weights), inputs, FLOAT64, tapes)
    saturated = _integer_saturation(op, inputs.x)
    found = []
    for k, d in enumerate(case.directions):
        grid = op.quantized.grids.get(f"0/{d}")
        if grid is None or grid.c is None:
            continue
        n = (op.ops[0] if d == 0 else op.ops[2]) if op.ops else op.index
        scale = grid.c.scale
        exponent = math.log2(scale)
        k_int = round(exponent)
        named = f"2^{k_int}" if abs(exponent - k_int) < 1e-3 else f"{scale:.5g}"
        if abs(exponent - k_int) >= 1e-3:
            found.append(f"c state of op {n}: scale {named} is not a power of two, as LiteRT's "
                         f"int8 LSTM kernel requires of it")
        elif k_int not in KERNEL_CELL_EXPONENTS:
            found.append(f"c state of op {n}: scale {named} is outside 2^-15 .. 2^-9, the cell "
                         f"scales whose tanh(c) LiteRT's int8 LSTM kernel computes (its "
                         f"ApplyTanh takes 0 to 6 integer bits and writes nothing otherwise)")
        c = np.abs(np.asarray(tapes[k].over_time("c")))
        bound = grid.c.qmax * scale
        reach = float(c.max(initial=0.0))
        if reach > bound:
            past = int(np.sum(c > bound))
            words = (f"c state of op {n}: scale {named} saturates at ±{bound:.3g}; c reaches "
                     f"{reach:.3g} on these inputs ({past} of {c.size} values past it, float64 "
                     f"on the file's weights)")
            if n in saturated:
                at, total = saturated[n]
                words += f"; the integer reference's c sits at its int16 ends in {at} of {total}"
            found.append(words)
    return found


def _integer_saturation(op: TfliteOp, x: np.ndarray) -> dict[int, tuple[int, int]]:
    """By LSTM op: how many of the integer reference's int16 c values sit at ±32767 (or
    -32768), of how many, running the whole file on ``x``; empty where the reference does not
    model the file or the file is not the layer."""
    from harness.reference.litert_int8_lstm import NotModelled, run_model

    if not op.whole or op.scheme != "int8":
        return {}
    try:
        ran = run_model(op.model, x)
    except NotModelled:
        return {}
    return {n: (int(np.sum(np.abs(t["c"]) >= INT16_MAX)), int(t["c"].size))
            for n, t in ran.traces.items()}
