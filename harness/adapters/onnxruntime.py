"""ONNX ``LSTM`` / ``GRU`` nodes built with ``onnx.helper``, run by ONNX Runtime on CPU.

Layout ``onnx``.

One graph per case, built, fed and read by harness/frameworks/onnx.py: one node per layer,
time-major (``layout=0``: ORT's CPU kernels refuse the batch-major ``layout=1``, "Batchwise
recurrent operations (layout == 1) are not supported", docs/layouts.md, onnx). The weights
are initializers named as in the layout (``W``, ``R``, ``B``, ``P`` or ``layer{k}/W`` ...); the
data (``X``, ``sequence_lens``, ``initial_h``/``initial_c`` per layer) are graph inputs.

Case features map to node attributes: ``gate_clip`` -> ``clip``, ``input_forget``,
``reset_after`` -> GRU ``linear_before_reset``, hard sigmoids -> ``activations`` with
``HardSigmoid`` and its ``alpha``/``beta``. With ``sequence_lens`` ORT writes zeros at padded
steps of ``Y``, returns each sequence's state at its last valid step in ``Y_h``/``Y_c``, and
starts the reverse direction at the last valid step (docs/layouts.md, onnx; Variable lengths and
padding), which is the harness
convention already: nothing is patched here.
"""

from __future__ import annotations

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.families.onnx import run_onnxruntime
from harness.frameworks.onnx import (
    HARD_SIGMOID,
    HARNESS_GRAPH,
    IR_VERSION,
    NUMPY_DTYPES,
    ONNX_REASONS,
    OPSET,
    build_model,
    feeds,
    handed,
    import_onnxruntime,
    node_attributes,
    read_outputs,
)
from harness.handed import Handed
from harness.spec import Case

# The graph is built, fed and read by harness/frameworks/onnx.py (shared with the openvino and
# onnx-reference adapters); its names stay importable from here.
__all__ = ["HARD_SIGMOID", "IR_VERSION", "NUMPY_DTYPES", "OPSET", "OnnxRuntime", "build_model",
           "feeds", "import_onnxruntime", "node_attributes", "read_outputs"]

class OnnxRuntime(Adapter):
    name = "onnxruntime"
    title = "ONNX LSTM/GRU nodes in ONNX Runtime (CPU)"
    framework = "onnx"
    requires = ("onnx", "onnxruntime")
    layout_name = "onnx"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        # ORT's CPU LSTM/GRU kernels reject double ("does not support double yet"). A float16
        # model runs: ORT inserts Casts and computes the node in float32 (no float16 kernel).
        dtypes=frozenset({"float32", "float16"}),
        peepholes=True,
        gate_clip=True,
        input_forget=True,
        recurrent_activations=frozenset(
            {"sigmoid", "hard_sigmoid_tf_keras", "hard_sigmoid_keras3"}),
        reasons=ONNX_REASONS | {
            "dtypes": "ONNX Runtime CPU LSTM/GRU: no float64 ('does not support double yet') "
                      "and no bfloat16 kernels (float32, and float16 via inserted Casts, only)",
        },
    )

    def route_note(self, case: Case) -> str | None:
        return HARNESS_GRAPH

    def check_available(self) -> None:
        import_onnxruntime()

    def versions(self) -> dict[str, str]:
        onnx, ort = import_onnxruntime()
        return {"onnx": onnx.__version__, "onnxruntime": ort.__version__}

    def session(self, case: Case, native: dict[str, np.ndarray], *,
                lengths: bool | None = None):
        """An ORT InferenceSession (CPU provider) of :func:`build_model`."""
        _, ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: ORT warns about unused initializers etc.
        return ort.InferenceSession(build_model(case, native, lengths=lengths).SerializeToString(),
                                    options, providers=["CPUExecutionProvider"])

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        model = build_model(case, native, lengths=inputs.seq_lengths is not None)
        return handed(model, feeds(case, inputs), runtime="onnxruntime", layout=0)

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        _, ort = import_onnxruntime()
        given = self.hand(case, native, inputs)
        feed = {k[len("feed/"):]: v for k, v in given.arrays.items()}
        got = run_onnxruntime(ort, given.files["model.onnx"], feed)  # as a reproducer runs it
        out = read_outputs(case, got)
        out.handed = given
        return out
