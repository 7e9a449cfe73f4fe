"""The harness's ONNX ``LSTM`` / ``GRU`` graph (harness/frameworks/onnx.py, the one the
onnxruntime and openvino adapters run) evaluated by ``onnx.reference.ReferenceEvaluator``, the
ONNX project's own NumPy implementation of the operators, in float64 (the operators' type T
allows double). A second reference written by others from the same specification, compared like
any adapter, not a baseline. Layout ``onnx``, nodes at ``layout=0`` (:attr:`onnx_layout`; it
runs ``layout=1`` right too, which tests/adapters/test_adapter_openvino.py uses to check the
batch-major graph the openvino-batch-major adapter is given).

The model is double whatever the case dtype: the case's values (already rounded to its dtype)
are computed in float64. The pair is judged with the case dtype's tolerances all the same, as
every adapter's is: a tolerance of its own would cost a blind-spot check of its own per case
(the pytest items' check; 7 s on seed 000's model), and its reports show errors near 1e-16.

Measured with onnx 1.23.2: its LSTM and GRU take ``sequence_lens``, ``clip``,
``activations``/``activation_alpha``/``activation_beta`` and (LSTM) ``input_forget`` and do
nothing with them (the output equals the model's without them), so cases with variable lengths,
a gate clip, hard sigmoids or input_forget are not applicable.
"""

from __future__ import annotations

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.families.onnx import run_onnx_reference
from harness.frameworks.onnx import (
    HARNESS_GRAPH,
    ONNX_REASONS,
    build_model,
    feeds,
    handed,
    import_onnx,
    read_outputs,
)
from harness.handed import Handed
from harness.spec import Case


def _ignored(what: str) -> str:
    return (f"onnx.reference's LSTM/GRU ignore {what} (onnx 1.23.2: the output equals the "
            "model's without it)")


class OnnxReference(Adapter):
    name = "onnx-reference"
    title = "ONNX LSTM/GRU nodes in onnx.reference.ReferenceEvaluator (float64)"
    framework = "onnx"
    requires = ("onnx",)
    layout_name = "onnx"
    onnx_layout = 0  # the nodes' layout attribute
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        peepholes=True,
        variable_lengths=False,
        reasons=ONNX_REASONS | {
            "variable_lengths": _ignored("sequence_lens"),
            "gate_clip": _ignored("the clip attribute"),
            "input_forget": _ignored("input_forget=1"),
            "recurrent_activations": _ignored("activations, activation_alpha/beta"),
        },
    )

    def route_note(self, case: Case) -> str | None:
        return HARNESS_GRAPH

    def check_available(self) -> None:
        import_onnx()
        from onnx.reference import ReferenceEvaluator  # noqa: F401  (onnx >= 1.13)

    def versions(self) -> dict[str, str]:
        return {"onnx": import_onnx().__version__, "computed_in": "float64"}

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        layout = self.onnx_layout
        model = build_model(case, native, lengths=inputs.seq_lengths is not None,
                            layout=layout, dtype=np.float64)
        return handed(model, feeds(case, inputs, layout=layout, dtype=np.float64),
                      runtime="onnx-reference", layout=layout)

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        import onnx
        from onnx.reference import ReferenceEvaluator

        given = self.hand(case, native, inputs)
        got = run_onnx_reference(onnx, ReferenceEvaluator, given.files["model.onnx"],
                                 {k[len("feed/"):]: v for k, v in given.arrays.items()})
        out = read_outputs(case, got, layout=self.onnx_layout)
        out.handed = given
        return out
