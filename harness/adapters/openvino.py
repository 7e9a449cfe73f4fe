"""The harness's ONNX ``LSTM`` / ``GRU`` graph (harness/adapters/_onnx.py, the one the
onnxruntime adapter runs) read by OpenVINO's ONNX frontend from memory and compiled for the CPU
plugin: ``openvino`` with the nodes' ``layout=0`` (time-major), ``openvino-batch-major`` with
``layout=1`` (batch-major). Layout ``onnx``.

The model's bytes go to the frontend through a BytesIO: no file is written. The CPU plugin picks
its inference precision from the CPU (bf16 on one with AVX-512 BF16 or AMX: the LSTMSequence
then runs in bfloat16 whatever the model's type), so ``INFERENCE_PRECISION_HINT`` is pinned to
f32 (:data:`COMPILE_CONFIG`, in versions(); the plugin's own default is in precision_flags()).

What OpenVINO 2026.4.1 does with each feature was measured (tests/test_adapter_openvino.py):

- runs right: sequence_lens, reverse and bidirectional directions, clip, GRU
  linear_before_reset 0 and 1, initial states, stacked layers, float16 (computed in float32).
- refuses: HardSigmoid activations ("Unsupported activation function", at compile_model).
- drops silently: LSTM peepholes ``P`` and ``input_forget`` (the output equals the model's
  without them; its frontend builds an LSTMSequence-5, which has neither), so both are not
  applicable, with that reason.
- float64: the CPU plugin converts a double model to float32 around the LSTMSequence
  (``INFERENCE_PRECISION_HINT`` has no f64), so a float64 case is not applicable.
- ``layout=1``: its ONNX frontend ignores the attribute (openvinotoolkit/openvino#37820) and
  reads the batch-major data as time-major. Where that makes the shapes disagree (batch,
  steps and directions not all equal) it refuses the model at conversion ("Dimension
  `batch_size` is not matched between inputs"): the pair is not applicable with that quote and
  the issue. Where they agree (cases/batch-major.yaml: batch = steps = directions = 2) it runs
  and is silently wrong: that case declares the pair a known upstream bug.
"""

from __future__ import annotations

import io

import numpy as np

from harness.adapters._onnx import ONNX_REASONS, build_model, feeds, import_onnx, read_outputs
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import NotApplicable, Unavailable
from harness.spec import Case

# f32 whatever the CPU: the plugin's default on a CPU with bf16 support is bf16
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}

# What OpenVINO 2026.4.1's ONNX frontend says of a batch-major model whose shapes, read as
# time-major, disagree (openvinotoolkit/openvino#37820)
LAYOUT_REFUSAL = "Dimension `batch_size` is not matched between inputs"

CAPABILITIES = Capabilities(
    directions=frozenset({"forward", "reverse", "bidirectional"}),
    dtypes=frozenset({"float32", "float16"}),
    gate_clip=True,
    reasons=ONNX_REASONS | {
        "dtypes": "OpenVINO CPU plugin: float32 and float16 only; a double model's LSTMSequence "
                  "runs in float32 (INFERENCE_PRECISION_HINT: 'Supported values: bf16, f16, "
                  "f32, undefined'), and a bfloat16 model is not built here",
        "peepholes": "OpenVINO's ONNX frontend drops LSTM input P silently (openvino 2026.4.1: "
                     "the output equals the model's without P; it builds an LSTMSequence-5, "
                     "which has no peepholes)",
        "input_forget": "OpenVINO's ONNX frontend ignores input_forget=1 silently (openvino "
                        "2026.4.1: the output equals the model's without it)",
        "recurrent_activations": "OpenVINO CPU plugin refuses HardSigmoid in activations: "
                                 "'Unsupported activation function' (compile_model)",
    },
)


def import_openvino():
    try:
        import openvino
        from openvino.frontend import FrontEndManager
    except ImportError as exc:
        raise Unavailable(f"openvino is not installed ({exc}); pip install openvino") from None
    return openvino, FrontEndManager


class OpenVINO(Adapter):
    name = "openvino"
    title = "ONNX LSTM/GRU nodes (layout=0) in OpenVINO (CPU)"
    framework = "openvino"
    requires = ("onnx", "openvino")
    layout_name = "onnx"
    native_in_case_dtype = True
    capabilities = CAPABILITIES
    onnx_layout = 0  # the nodes' layout attribute: 0 time-major, 1 batch-major

    _core = None
    _frontend = None

    def check_available(self) -> None:
        import_onnx()
        import_openvino()

    def versions(self) -> dict[str, str]:
        ov, _ = import_openvino()
        return {"onnx": import_onnx().__version__, "openvino": ov.__version__,
                "compile_config": ", ".join(f"{k}={v}" for k, v in COMPILE_CONFIG.items())}

    def precision_flags(self) -> dict[str, object]:
        """The CPU plugin's own inference precision here, which :data:`COMPILE_CONFIG`
        overrides for every compiled model."""
        return {"openvino.CPU.INFERENCE_PRECISION_HINT (default, overridden)":
                self.core().get_property("CPU", "INFERENCE_PRECISION_HINT").get_type_name()}

    def core(self):
        """One ``ov.Core`` and ONNX frontend per process (made on first use)."""
        if OpenVINO._core is None:
            ov, FrontEndManager = import_openvino()
            OpenVINO._core = ov.Core()
            OpenVINO._frontend = FrontEndManager().load_by_framework("onnx")
        return OpenVINO._core

    def convert(self, case: Case, native: dict[str, np.ndarray], *, lengths: bool):
        """The ov.Model of :func:`build_model` at this adapter's layout, read from memory."""
        self.core()
        model = build_model(case, native, lengths=lengths, layout=self.onnx_layout)
        try:
            return self._frontend.convert(self._frontend.load(io.BytesIO(
                model.SerializeToString())))
        except Exception as exc:
            if self.onnx_layout == 1 and LAYOUT_REFUSAL in str(exc):
                raise NotApplicable(
                    f"OpenVINO refuses this batch-major (layout=1) model: '{LAYOUT_REFUSAL}'; "
                    "its ONNX frontend reads layout=1 data as time-major "
                    "(openvinotoolkit/openvino#37820)") from None
            raise

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        model = self.convert(case, native, lengths=inputs.seq_lengths is not None)
        compiled = self.core().compile_model(model, "CPU", COMPILE_CONFIG)
        result = compiled(feeds(case, inputs, layout=self.onnx_layout))
        got = {port.get_any_name(): value for port, value in result.items()}
        return read_outputs(case, got, layout=self.onnx_layout)


class OpenVINOBatchMajor(OpenVINO):
    name = "openvino-batch-major"
    title = "ONNX LSTM/GRU nodes (layout=1, batch-major) in OpenVINO (CPU)"
    onnx_layout = 1
