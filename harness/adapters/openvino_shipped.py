"""``openvino-shipped``: the case's ``shipped:`` OpenVINO IR run as the file holds it, in
OpenVINO (CPU), never rebuilt from the case's weights (docs/cases.md, A shipped file).

The model is read from the .xml by OpenVINO, the sequence op's data inputs (X, the initial
states, the lengths) replaced by parameters and its outputs made the model's results, so that
the op runs with its own attributes and the file's own constants (and their f16 -> f32
decompression) on the case's inputs (:func:`harness.frameworks.openvino_ir.run_op`, as compare runs
it), compiled with ``INFERENCE_PRECISION_HINT`` f32: the case's float32 tolerance judges it (the
CPU's bf16 default is compare's second verdict, not a run's).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.spec import Case

NOT_SHIPPED = "the case names no shipped OpenVINO IR (shipped: {file: model.xml})"


class OpenVINOShipped(Adapter):
    name = "openvino-shipped"
    title = "the case's shipped OpenVINO IR, its sequence op run as it is (CPU, f32)"
    framework = "openvino"
    layout_name = None  # the file's own weights run, never the case's
    requires = ("openvino",)
    named_only = ("runs a case's shipped: OpenVINO IR only; a case with one runs it without "
                  "naming it")
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        gate_clip=True,  # where the file's op clips (the case must say so: the file tells)
        multi_layer=False,
        reasons={
            "dtypes": "openvino-shipped: the shipped IR runs pinned to f32: a float32 case",
            "multi_layer": "openvino-shipped: the shipped file runs one recurrent layer",
            "gradients": "openvino-shipped: OpenVINO runs inference only (no backward pass)",
        },
    )

    def check_available(self) -> None:
        from harness.frameworks.openvino import import_openvino

        import_openvino()  # as the openvino adapter imports it: no telemetry

    def asked_for(self, case: Case) -> bool:
        return case.shipped is not None and Path(case.shipped.file).suffix.lower() == ".xml"

    def not_applicable_reason(self, case: Case) -> str | None:
        if not self.asked_for(case):
            return f"{self.name}: {NOT_SHIPPED}"
        return super().not_applicable_reason(case)

    def route_note(self, case: Case) -> str | None:
        seq = _layer(case).ir
        return (f"ran the shipped {seq.op_type} op cut out of the IR (its own attributes and "
                "constants) in OpenVINO (CPU, f32)")

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        from harness.frameworks.onnx import read_outputs
        from harness.frameworks.openvino_ir import IrOpRef, run_op

        seq = _layer(case).ir
        ref = IrOpRef(str(case.resolve(case.shipped.file)), seq.name, seq.op_type, seq.op_id,
                      dict(seq.weights), seq.stored, loop=dict(seq.loop))
        got = run_op(ref, inputs, case, "f32")
        named = {"Y0": got[0].transpose(2, 1, 0, 3), "Y_h0": got[1].transpose(1, 0, 2)}
        if case.cell_kind.has_cell_state:
            named["Y_c0"] = got[2].transpose(1, 0, 2)
        return read_outputs(case, named)


def _layer(case: Case):  # noqa: ANN202  (harness.readers.deployed.FileLayer)
    from harness.readers.deployed import shipped_layer

    return shipped_layer(case)
