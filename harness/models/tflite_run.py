"""A shipped ``.tflite`` layer run as the file is, in the LiteRT interpreter (never a file
rebuilt from weights), for the shipped-outputs judge (:mod:`harness.models.judges.shipped`).

A float file runs through the run's own pair path (:class:`ShippedTflite` is an adapter that
ignores the weights it is handed) against the float64 reference on the original's weights. A
quantized file is judged as a quantized runtime is (:func:`harness.quantization.judge`): against
the integer-aware reference with the file's own grids, in output steps, and by its SQNR over
y against an ideal quantization of the original's weights; an int8 file that the integer
reference of LiteRT's 8x8->16 LSTM kernel models (:mod:`harness.reference.litert_int8_lstm`) is
also checked against it to the bit (:func:`harness.reference.litert_int8_exact.bit_exact`).

The file runs as it is where it is the layer (its one input feeds the op, directly or through
one QUANTIZE; its one output is the op's y, directly or through one DEQUANTIZE). A Keras
``go_backwards`` layer (a lone op reading its input through a ``REVERSE_V2`` on the time
axis: :func:`harness.readers.tflite_reversals.reversal_of`) runs as the file is where the
model's input feeds that ``REVERSE_V2`` and its output is the op's y (or the y reversed back),
else the op alone is cut out and fed its input reversed in time; its y is taken back to input
time order either way (:meth:`~harness.readers.tflite.TfliteOp.in_time_order`), the harness's
reverse direction. A Keras Bidirectional layer is several ops (two fused LSTMs, two
REVERSE_V2s, a CONCATENATION: :func:`harness.readers.tflite_reversals.bidirectional_pairs`): the
file runs as it is where its input feeds them and its output is the CONCATENATION's, else
those ops are cut out together. Where the op sits inside a larger model, the op is cut out
(:func:`harness.frameworks.litert_run.cut`: a one-op ``.tflite`` holding the file's own op,
constants, grids and state variables, its input and output the op's own, integer in an integer file)
and run on generated inputs; with ``--inputs`` the user's data runs through the whole file with its
intermediate tensors preserved (:func:`activations`) and the op's input activations are the layer's
inputs. Zero initial states either way (the op's state tensors are variables, zero when the
interpreter starts)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.frameworks.litert_run import cut, interpret
from harness.frameworks.litert_run import interpreter as _interpreter
from harness.frameworks.tflite_tensors import from_file as _from_file
from harness.frameworks.tflite_tensors import to_file as _to_file
from harness.spec import Case

if TYPE_CHECKING:
    from harness.readers.tflite import TfliteOp

ABSENT = "the shipped .tflite outputs y only"


def activations(op: TfliteOp, data: np.ndarray) -> np.ndarray:
    """What the op reads as its input when the whole file runs on ``data`` (the model's one
    input), from the interpreter's preserved intermediate tensors, dequantized on its grid
    (on that grid exactly: the integers are the file's own)."""
    from harness.errors import HarnessError

    interpreter = _interpreter(op.model, preserve=True)
    [given] = interpreter.get_input_details()
    x = np.asarray(data)
    if tuple(x.shape) != tuple(int(s) for s in given["shape"]):
        try:
            interpreter.resize_tensor_input(given["index"], list(x.shape))
            interpreter.allocate_tensors()
        except Exception as exc:
            raise HarnessError(f"the shipped .tflite's input is shaped "
                               f"{[int(s) for s in given['shape']]}, the data "
                               f"{list(x.shape)}, and the file cannot be resized to it "
                               f"({(str(exc).splitlines() or [''])[0][:160]})",
                               field="--inputs") from None
    interpreter.set_tensor(given["index"], _to_file(given, x))
    interpreter.invoke()
    from harness.frameworks import litert_flatbuffer as fb

    ops = fb.read(op.model).ops
    # a reversed op's layer input is its REVERSE_V2's (the reversal is the layer's own)
    index = ops[op.reversed_in[0] if op.reversed_in else op.index].inputs[0]
    [detail] = [d for d in interpreter.get_tensor_details() if d["index"] == index]
    return _from_file(detail, interpreter.get_tensor(index))


class ShippedTflite(Adapter):
    """The shipped ``.tflite`` run by the LiteRT interpreter, as the file is."""

    framework = "litert"
    layout_name = None
    saved_models = ("tflite",)
    name = "litert"
    title = "the shipped .tflite in the LiteRT interpreter"
    requires = ("ai_edge_litert",)
    # a go_backwards op is read as direction reverse (harness.readers.tflite_reversals)
    capabilities = Capabilities(directions=frozenset({"forward", "reverse", "bidirectional"}))

    def __init__(self, op: TfliteOp) -> None:
        self.op = op
        # the file itself where it is the layer, else its op cut out
        self.model = (op.model if op.whole or op.op == "WHILE"
                      else cut(op.model, op.index, op.ops))

    def check_available(self) -> None:
        from harness.frameworks.litert import import_litert

        import_litert()

    def route_note(self, case: Case) -> str | None:
        return ("ran the shipped file itself" if self.op.whole
                else f"ran the shipped file's ops {list(self.op.ops)} cut out as a .tflite"
                if self.op.ops else "ran the shipped file's op cut out as a one-op .tflite"
                + (" on its input reversed in time" if self.op.reversed_in else ""))

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        y = self.op.in_time_order(interpret(self.model, self.op.feed(inputs.x)))
        absent = {"h_n": ABSENT, **({"c_n": ABSENT} if case.cell_kind.has_cell_state else {})}
        return Outputs(y=y, h_n=None, c_n=None, absent=absent, models={"tflite": self.model})


def zero_states(inputs: Inputs) -> Inputs:
    """The inputs with zero initial states: the file's state tensors start at zero."""
    return replace(inputs, h0=np.zeros_like(inputs.h0),
                   c0=None if inputs.c0 is None else np.zeros_like(inputs.c0))
