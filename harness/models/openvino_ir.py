"""An OpenVINO IR's recurrent layers as ``compare`` reads and runs them.

:func:`ir_layers`: each LSTMSequence/GRUSequence op of the .xml, and each TensorIterator
stepping one LSTMCell/GRUCell over time (read by
:mod:`harness.readers.openvino_ir`, without OpenVINO) as a :class:`~harness.models.layers.Layer`
in ONNX's layout (OpenVINO stores one bias per gate, the input and recurrent biases summed:
the weights judge compares the original's sums with it, :attr:`IrOpRef.biases_summed`).

:class:`ShippedIR`: the op run as the user's file holds it, in OpenVINO (CPU,
:func:`harness.frameworks.openvino_ir.run_op`): the model read
from the .xml (``Core.read_model``), the op's data inputs (X, the initial states, the lengths)
replaced by parameters and its outputs made the model's results, so that the op runs with its
own attributes and the file's own constants (and their f16 -> f32 decompression), never
rebuilt from weights; then compiled with the runtime's default inference precision (bf16 on a
CPU with AVX-512 BF16 or AMX, judged by the low-precision rules in that precision) and again
pinned to f32: two verdicts, side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.dtypes import FORMATS
from harness.errors import WeightsError
from harness.frameworks.openvino_ir import IrOpRef, default_precision, run_op
from harness.spec import Case

# what OpenVINO's INFERENCE_PRECISION_HINT names -> the case dtype it computes in
PRECISION_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}
CAPABILITIES = Capabilities(
    directions=frozenset({"forward", "reverse", "bidirectional"}),
    dtypes=frozenset({"float32", "float16", "bfloat16"}), gate_clip=True)
# a TensorIterator steps over every step of X: it has no lengths input
LOOP_CAPABILITIES = replace(CAPABILITIES, variable_lengths=False, reasons={
    "variable_lengths": "a TensorIterator steps over every step of X: it has no lengths"})


@dataclass(frozen=True)
class IrRead:
    """One sequence op read from the IR: its ``name``, case ``fields``, weights as an ONNX
    node's (``native``), where it is in words, and what runs it (``ref``)."""

    name: str
    fields: dict
    native: dict[str, np.ndarray] = field(repr=False)
    where: str
    ref: IrOpRef


def ir_layers(path: Path, label: str, limit: int) -> list[IrRead]:
    """The sequence ops of the IR ``path``, errors naming ``label``. An op whose weights are
    not constants is refused, naming it."""
    from harness.readers.limits import one_line
    from harness.readers.openvino_ir import fields_of, onnx_native, read_sequences

    found = []
    for seq in one_line(path, lambda: read_sequences(path, limit)):
        if seq.problem is not None:
            raise WeightsError(seq.problem, file=label)
        try:
            fields = fields_of(seq)
        except WeightsError as exc:
            exc.file = label
            raise
        ref = IrOpRef(str(path), seq.name, seq.op_type, seq.op_id, dict(seq.weights),
                      seq.stored, loop=dict(seq.loop))
        what = f"{seq.op_type} op {seq.name!r}" if not seq.loop else (
            f"{seq.op_type} {seq.name!r} (one {seq.cell.upper()} cell stepped over time)")
        found.append(IrRead(seq.name, fields, onnx_native(seq),
                            f"{what} of the OpenVINO IR", ref))
    return found


def ir_adapters(ref: IrOpRef) -> tuple[ShippedIR, ...]:
    """The IR's op run at the runtime's default inference precision, then at f32."""
    from harness.frameworks.openvino import import_openvino

    try:
        import_openvino()
        default = default_precision()
    except Exception:  # not installed: both verdicts say so (check_available)
        default = None
    return (ShippedIR(ref, None, default), ShippedIR(ref, "f32", "f32"))


class ShippedIR(Adapter):
    """One sequence op of a shipped OpenVINO IR, cut out of the model as the file holds it and
    compiled for the CPU with ``hint`` (None: the runtime's default, ``precision``)."""

    framework = "openvino"
    layout_name = None
    requires = ("openvino",)
    capabilities = CAPABILITIES

    def __init__(self, ref: IrOpRef, hint: str | None, precision: str | None) -> None:
        self.ref, self.hint, self.precision = ref, hint, precision
        if ref.loop:
            self.capabilities = LOOP_CAPABILITIES
        shown = precision or "?"
        self.name = (f"openvino, INFERENCE_PRECISION_HINT (default) {shown}" if hint is None
                     else f"openvino, INFERENCE_PRECISION_HINT {hint}")
        self.title = f"the shipped {ref.op_type} op of the IR in OpenVINO"
        # the case dtype the outputs are judged in: the coarser of the precision computed in
        # and the weights' stored type (f16 weights decompressed to f32 are f16-rounded), by
        # the low-precision rules (that format's noise floor and tolerance)
        computed = PRECISION_DTYPES.get(precision or "f32", "float32")
        self.case_dtype = max(computed, ref.stored, key=lambda d: float(FORMATS[d].eps))

    def check_available(self) -> None:
        from harness.frameworks.openvino import import_openvino

        import_openvino()

    def route_note(self, case: Case) -> str | None:
        return (f"ran the shipped {self.ref.op_type} op cut out of the IR (its own attributes "
                "and constants) in OpenVINO (CPU)")

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        from harness.frameworks.onnx import read_outputs

        got = run_op(self.ref, inputs, case, self.hint)
        named = {"Y0": got[0].transpose(2, 1, 0, 3), "Y_h0": got[1].transpose(1, 0, 2)}
        if case.cell_kind.has_cell_state:
            named["Y_c0"] = got[2].transpose(1, 0, 2)
        return read_outputs(case, named)
