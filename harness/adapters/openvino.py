"""The harness's ONNX ``LSTM`` / ``GRU`` graph (harness/frameworks/onnx.py, the one the
onnxruntime adapter runs) read by OpenVINO's ONNX frontend from memory and compiled for the CPU
plugin: ``openvino`` with the nodes' ``layout=0`` (time-major), ``openvino-batch-major`` with
``layout=1`` (batch-major). Layout ``onnx``.

The model's bytes go to the frontend through a BytesIO: no file is written. The CPU plugin picks
its inference precision from the CPU (bf16 on one with AVX-512 BF16 or AMX: the LSTMSequence
then runs in bfloat16 whatever the model's type), so ``INFERENCE_PRECISION_HINT`` is pinned to
f32 (:data:`COMPILE_CONFIG`, in versions(); the plugin's own default is in precision_flags()).

What OpenVINO 2026.4.1 does with each feature was measured
(tests/adapters/test_adapter_openvino.py):

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
  `batch_size` is not matched between inputs"); where they agree (cases/batch-major.yaml:
  batch = steps = directions = 2) it runs and is silently wrong. So ``openvino-batch-major``
  is unavailable where the installed OpenVINO does this (:func:`layout_ignored`, one small
  conversion, no version hard-coded): every declared capability fails at the contract's sizes.
  It becomes available once OpenVINO reads the attribute; its known-bug entry
  (harness/known_bugs.py) then says whether the values are right ("looks fixed").
"""

from __future__ import annotations

import io

import numpy as np

from harness.adapters._nncf import (
    GRU_LINEAR_BEFORE_RESET,
    RECURRENT,
    WEIGHT_INPUTS,
    data_fake_quantize,
    fake_quantize_grid,
    import_nncf,
    source,
    stored_weight,
)
from harness.adapters.base import Adapter, AdapterFault, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import NotApplicable, Unavailable
from harness.families.onnx import run_openvino
from harness.frameworks.onnx import (
    HARNESS_GRAPH,
    ONNX_REASONS,
    build_model,
    feeds,
    handed,
    import_onnx,
    read_outputs,
)
from harness.frameworks.openvino import core, import_openvino, onnx_frontend
from harness.grids import LayerGrids, QuantizedModel
from harness.handed import Handed
from harness.quantization import calibration_inputs
from harness.spec import Case

# f32 whatever the CPU: the plugin's default on a CPU with bf16 support is bf16
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


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


class OpenVINO(Adapter):
    name = "openvino"
    title = "ONNX LSTM/GRU nodes (layout=0) in OpenVINO (CPU)"
    framework = "openvino"
    requires = ("onnx", "openvino")
    layout_name = "onnx"
    native_in_case_dtype = True
    capabilities = CAPABILITIES
    onnx_layout = 0  # the nodes' layout attribute: 0 time-major, 1 batch-major

    def route_note(self, case: Case) -> str | None:
        return HARNESS_GRAPH

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
        """One ``ov.Core`` and ONNX frontend per process (made on first use,
        :func:`harness.frameworks.openvino.core`)."""
        return core()

    def convert(self, case: Case, native: dict[str, np.ndarray], *, lengths: bool,
                layout: int | None = None):
        """The ov.Model of :func:`build_model` at ``layout`` (by default this adapter's), read
        from memory."""
        frontend = onnx_frontend()
        model = build_model(case, native, lengths=lengths,
                            layout=self.onnx_layout if layout is None else layout)
        return frontend.convert(frontend.load(io.BytesIO(model.SerializeToString())))

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """The model's bytes, the feeds and the compile config (imports onnx, not openvino)."""
        model = build_model(case, native, lengths=inputs.seq_lengths is not None,
                            layout=self.onnx_layout)
        return handed(model, feeds(case, inputs, layout=self.onnx_layout), runtime="openvino",
                      layout=self.onnx_layout, compile_config=dict(COMPILE_CONFIG))

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        given = self.hand(case, native, inputs)
        got = run_openvino(core(), onnx_frontend(), given.files["model.onnx"], COMPILE_CONFIG,
                           {k[len("feed/"):]: v for k, v in given.arrays.items()})
        out = read_outputs(case, got, layout=self.onnx_layout)
        out.handed = given
        return out


class OpenVINOBatchMajor(OpenVINO):
    name = "openvino-batch-major"
    title = "ONNX LSTM/GRU nodes (layout=1, batch-major) in OpenVINO (CPU)"
    onnx_layout = 1

    def check_available(self) -> None:
        super().check_available()
        reason = self.layout_ignored()
        if reason:
            raise Unavailable(reason)

    def layout_ignored(self) -> str | None:
        """Why the installed OpenVINO cannot run a batch-major graph, or None: an LSTM of
        batch 2 and 3 steps, with its initial states, at ``layout=1`` must convert with ``Y``
        [N, T, D, H] = [2, 3, 1, 1] (the contract's sizes, harness/adapters/base.py's
        capabilities run there)."""
        ov, _ = import_openvino()
        case = Case(name="layout-check", cell="lstm", input_size=1, hidden_size=1, batch=2,
                    seq_len=3)
        native = {name: np.zeros(shape, np.float32)
                  for name, shape in self.layout.shapes(case).items()}
        why = (f"openvino {ov.__version__.split('-')[0]} ignores the ONNX LSTM/GRU layout "
               "attribute (openvinotoolkit/openvino#37820)")
        try:
            model = self.convert(case, native, lengths=False, layout=1)
        except Exception as exc:  # noqa: BLE001  (its words are the reason)
            said = str(exc).strip().splitlines()
            quote = next((line for line in said if "not matched" in line), said[-1] if said
                         else type(exc).__name__)
            return (f"{why}: a batch-major model of batch 2 and 3 steps is refused ('{quote}'); "
                    "one whose batch, steps and directions agree runs wrong "
                    "(cases/batch-major.yaml)")
        shape = [str(d) for d in model.output("Y0").get_partial_shape()]
        if shape != ["2", "3", "1", "1"]:
            return f"{why}: a batch-major model's Y is [{', '.join(shape)}], not [2, 3, 1, 1]"
        return None


class OpenVINONNCFInt8(OpenVINO):
    name = "openvino-nncf-int8"
    title = "the ONNX LSTM/GRU graph in OpenVINO, static int8 by NNCF (CPU plugin)"
    framework = "openvino"
    requires = ("onnx", "openvino", "nncf")
    named_only = "NNCF's calibration and the compilation cost seconds a model"
    quantized = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32"}),
        variable_lengths=False,
        initial_state=False,
        reasons=CAPABILITIES.reasons | {
            "dtypes": "NNCF quantizes a float32 model",
            "variable_lengths": "a deployed quantized model has no lengths here (NNCF is "
                                "calibrated on full sequences)",
            "initial_state": "a deployed quantized model starts from zero states (NNCF "
                             "calibrates initial_h at zero)",
        },
    )

    def check_available(self) -> None:
        super().check_available()
        import_nncf()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "nncf": import_nncf().__version__,
                "scheme": "static int8 (nncf.quantize, default preset)"}

    def quantize(self, case: Case, native: dict[str, np.ndarray]):
        """The NNCF-quantized ov.Model of the case's graph."""
        nncf = import_nncf()
        frontend = onnx_frontend()
        model = build_model(case, native, lengths=False)
        ov_model = frontend.convert(frontend.load(io.BytesIO(model.SerializeToString())))
        zeros = np.zeros((case.num_layers * case.num_directions, case.batch, case.hidden_size))
        c0 = zeros if case.cell_kind.has_cell_state else None
        names = {port.get_any_name() for port in ov_model.inputs}
        batches = [{k: v.astype(np.float32) for k, v in feeds(
            case, Inputs(x=x, h0=zeros, c0=c0, seq_lengths=None)).items() if k in names}
            for x in calibration_inputs(case)]
        return nncf.quantize(ov_model, nncf.Dataset(batches), subset_size=len(batches))

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        quantized = self.quantize(case, native)
        ops = [op for op in quantized.get_ordered_ops() if op.get_type_name() in RECURRENT]
        compiled = self.core().compile_model(quantized, "CPU", COMPILE_CONFIG)
        kernels = sorted({op.get_rt_info()["runtimePrecision"].astype(str)
                          for op in compiled.get_runtime_model().get_ordered_ops()
                          if op.get_rt_info()["layerType"].astype(str) == "RNNSeq"})
        stored = {}
        for op in ops:
            for k, name in zip(WEIGHT_INPUTS[op.get_type_name()], ("W", "R"), strict=True):
                stored.setdefault(name, []).append(stored_weight(source(op.input(k))))
        int8 = all(is_int for values in stored.values() for _, is_int in values)
        fq = [data_fake_quantize(op) for op in ops]
        what = (f"{', '.join(op.get_type_name() for op in ops)}: W, R "
                f"{'int8' if int8 else 'float'}, X {'FakeQuantize' if all(fq) else 'float'}; "
                f"the CPU plugin runs RNNSeq in {', '.join(kernels)}")
        if not ops or not int8 or not all(fq) or not any(p in ("u8", "i8") for p in kernels):
            gru_lbr = case.cell_kind.separate_biases(case.reset_after)
            if ops and not int8 and (gru_lbr or not case.cell_kind.reset_gate):
                # measured (nncf 3.4.0): NNCF leaves these ops' weights float by design, so
                # there is no int8 kernel to judge; any other float model is an error row
                raise NotApplicable(f"NNCF does not quantize this op's weights: {what}"
                                    + (f" ({GRU_LINEAR_BEFORE_RESET})" if gru_lbr else ""))
            raise AdapterFault(f"nothing was quantized: {what}"
                               + (f" ({GRU_LINEAR_BEFORE_RESET})" if gru_lbr else ""))
        if len(ops) != case.num_layers:
            raise AdapterFault(f"{len(ops)} recurrent ops for {case.num_layers} layers: {what}")
        # the weights as stored, in the onnx layout's names (one op per layer, [D, G*H, .])
        as_stored = dict(native)
        for name, values in stored.items():
            for layer, (value, _) in enumerate(values):
                key = name if case.num_layers == 1 else f"layer{layer}/{name}"
                if value.shape != native[key].shape:
                    raise AdapterFault(f"{name} of layer {layer} stored as {value.shape}, the "
                                       f"graph's {native[key].shape}")
                bound = float(np.max(np.abs(native[key]))) / 127.0
                if np.any(np.abs(value - native[key]) > bound):  # a gate order moved
                    raise AdapterFault(f"{name} of layer {layer}: the stored weights are "
                                       f"more than one int8 step from the graph's")
                as_stored[key] = value
        grids = {}
        for layer, data_fq in enumerate(fq):
            g = fake_quantize_grid(data_fq)
            for d in case.directions:
                grids[f"{layer}/{d}"] = LayerGrids(x=g, h=g)
        weights = self.layout.from_native(as_stored, case).tensors
        model = QuantizedModel("int8", weights, grids, output=fake_quantize_grid(fq[-1]))
        result = compiled({k: v for k, v in feeds(case, inputs).items()
                           if k in {p.get_any_name() for p in compiled.inputs}})
        got = {port.get_any_name(): value for port, value in result.items()}
        out = read_outputs(case, got)
        out.note = what
        out.quantized = model
        return out
