"""A shipped ``.tflite`` layer run as the file is, in the LiteRT interpreter (never a file
rebuilt from weights), for the shipped-outputs judge (:mod:`harness.judges.shipped`).

A float file runs through the run's own pair path (:class:`ShippedTflite` is an adapter that
ignores the weights it is handed) against the float64 reference on the original's weights. A
quantized file is judged as a quantized runtime is (:func:`harness.quantization.judge`): against
the integer-aware reference with the file's own grids, in output steps, and by its SQNR over
y against an ideal quantization of the original's weights; an int8 file that the integer
reference of LiteRT's 8x8->16 LSTM kernel models (:mod:`harness.reference.litert_int8_lstm`) is
also checked against it to the bit.

The layer runs where the file is the layer (its one input feeds the op, directly or through one
QUANTIZE; its one output is the op's y, directly or through one DEQUANTIZE), on zero initial
states (the op's state tensors are variables, zero when the interpreter starts)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case

if TYPE_CHECKING:
    from harness.models.tflite import TfliteOp

ABSENT = "the shipped .tflite outputs y only"


def interpret(model: bytes, x: np.ndarray) -> np.ndarray:
    """The file's one output on its one input ``x``, in the LiteRT interpreter."""
    from harness.adapters._litert import import_litert
    from harness.adapters._tf import native_stderr_to_scratch

    Interpreter = import_litert()
    with native_stderr_to_scratch():  # the "Created ... XNNPACK delegate" line
        interpreter = Interpreter(model_content=model)
        interpreter.allocate_tensors()
    [given] = interpreter.get_input_details()
    interpreter.set_tensor(given["index"], np.ascontiguousarray(x, dtype=given["dtype"]))
    interpreter.invoke()
    [out] = interpreter.get_output_details()
    return np.asarray(interpreter.get_tensor(out["index"]), dtype=np.float64)


class ShippedTflite(Adapter):
    """The shipped ``.tflite`` run by the LiteRT interpreter, as the file is."""

    framework = "litert"
    layout_name = None
    saved_models = ("tflite",)
    name = "litert"
    title = "the shipped .tflite in the LiteRT interpreter"
    requires = ("ai_edge_litert",)
    capabilities = Capabilities()

    def __init__(self, op: TfliteOp) -> None:
        self.op = op

    def check_available(self) -> None:
        from harness.adapters._litert import import_litert

        import_litert()

    def route_note(self, case: Case) -> str | None:
        return "ran the shipped file itself"

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        y = interpret(self.op.model, inputs.x)
        return Outputs(y=y, h_n=None, c_n=None, absent={"h_n": ABSENT, "c_n": ABSENT},
                       models={"tflite": self.op.model})


def zero_states(inputs: Inputs) -> Inputs:
    """The inputs with zero initial states: the file's state tensors start at zero."""
    return replace(inputs, h0=np.zeros_like(inputs.h0),
                   c0=None if inputs.c0 is None else np.zeros_like(inputs.c0))


def bit_exact(op: TfliteOp, x: np.ndarray, got: np.ndarray) -> str:
    """Words on the int8 kernel against the integer reference of LiteRT's 8x8->16 LSTM kernel:
    "" where that reference does not model the file."""
    from harness.reference.litert_int8_lstm import NotModelled, run_model

    try:
        ran = run_model(op.model, x)
    except NotModelled:
        return ""
    same = np.array_equal(np.asarray(ran.output, dtype=np.float64), got)
    return ("bit-exact against the integer reference of LiteRT's int8 LSTM kernel" if same
            else "differs from the integer reference of LiteRT's int8 LSTM kernel (max "
                 f"{float(np.max(np.abs(ran.output - got))):.3g})")
