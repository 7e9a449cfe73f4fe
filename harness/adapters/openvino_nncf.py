"""``openvino-nncf-int8``: the harness's ONNX ``LSTM`` / ``GRU`` graph read by OpenVINO's ONNX
frontend (the ``openvino`` adapter's model), quantized by ``nncf.quantize`` (static int8,
calibrated on the case's own input distribution at its batch and sequence length,
:func:`harness.quantization.calibration_inputs`, zero initial states as deployed) and compiled
for the CPU plugin. Layout ``onnx``.

What NNCF does with each recurrent op decides whether there is an integer kernel to judge
(measured with NNCF 3.4.0, OpenVINO 2026.4.1: docs/quantization.md, ``benchmarks/
quantizer_coverage.py``):

- ``GRUSequence`` with ``linear_before_reset=0`` (``reset_after: false``): ``FakeQuantize`` on
  ``X`` and ``initial_h``, ``W`` and ``R`` int8 constants dequantized by ``Convert`` /
  ``Multiply``; the CPU plugin runs the ``RNNSeq`` in u8 (oneDNN's int8 RNN);
- ``GRUSequence`` with ``linear_before_reset=1``: left float (openvinotoolkit/nncf#2105, PR#2115:
  oneDNN has no int8 kernel for it);
- ``LSTMSequence``: ``FakeQuantize`` on its data inputs only, weights float, ``RNNSeq`` in f32.

A model whose recurrent ops read no int8 weight, or which the plugin runs in floating point,
is an error row ("nothing was quantized"): a quantized pair that passes on a float kernel tests
nothing (executorch PR#14893).

The integer-aware reference (:func:`harness.quantization.judge`) follows oneDNN's int8 RNN:
``x`` on the data grid its ``FakeQuantize`` declares (u8, ``levels`` 256), the hidden state
``h`` requantized to that same grid every step (oneDNN keeps ``src_iter`` / ``dst_iter`` at the
data scale and shift of ``src_layer``), ``y`` on it too, the weights as stored (the int8
constants times their scales); gates in float from 32-bit accumulators. k: as for LiteRT
(docs/quantization.md, "k").
"""

from __future__ import annotations

import io

import numpy as np

from harness.adapters._onnx import build_model, feeds, read_outputs
from harness.adapters.base import AdapterFault, Capabilities
from harness.adapters.openvino import CAPABILITIES, COMPILE_CONFIG, OpenVINO, import_openvino
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.quantization import Grid, LayerGrids, QuantizedModel, calibration_inputs
from harness.spec import Case

NOT_QUANTIZED_CASE = "not a quantized case (it has no quantization: key; docs/quantization.md)"
RECURRENT = ("LSTMSequence", "GRUSequence")
# input index of W and R on each recurrent op (OpenVINO opset5: X, H[, C], lengths, W, R, B)
WEIGHT_INPUTS = {"LSTMSequence": (4, 5), "GRUSequence": (3, 4)}
GRU_LINEAR_BEFORE_RESET = ("NNCF leaves a GRUSequence with linear_before_reset=True float "
                           "(openvinotoolkit/nncf#2105, PR#2115: oneDNN has no int8 kernel for "
                           "it)")


def import_nncf():
    try:
        import nncf
    except ImportError as exc:
        raise Unavailable(f"nncf is not installed ({exc}); pip install nncf") from None
    return nncf


def fake_quantize_grid(fq) -> Grid:
    """The grid of an OpenVINO ``FakeQuantize`` whose input and output ranges are equal (what
    NNCF writes for activations): ``levels`` points from ``input_low`` to ``input_high``."""
    low, high, out_low, out_high = (
        np.asarray(fq.input(k).get_source_output().get_node().get_data(), np.float64)
        for k in range(1, 5))
    if low.size != 1 or high.size != 1:
        raise AdapterFault(f"{fq.get_friendly_name()}: a per-channel FakeQuantize on an "
                           f"activation ({low.size} ranges); the harness reads one grid")
    if not (np.allclose(low, out_low) and np.allclose(high, out_high)):
        raise AdapterFault(f"{fq.get_friendly_name()}: FakeQuantize input range "
                           f"[{low.item()}, {high.item()}] differs from its output range "
                           f"[{out_low.item()}, {out_high.item()}]")
    scale = (high.item() - low.item()) / (fq.get_levels() - 1)
    return Grid(scale, int(np.rint(-low.item() / scale)), 0, fq.get_levels() - 1)


def source(port):
    return port.get_source_output().get_node()


def data_fake_quantize(op) -> object | None:
    """The ``FakeQuantize`` on the recurrent op's input ``X`` (through data movement), or
    None."""
    node = source(op.input(0))
    while node.get_type_name() in ("Transpose", "Reshape", "Convert"):
        node = source(node.input(0))
    return node if node.get_type_name() == "FakeQuantize" else None


def stored_weight(node) -> tuple[np.ndarray, bool]:
    """A weight input's value as stored, in float64, and whether it is stored in int8: the
    ``Constant`` / ``Convert`` / ``Subtract`` / ``Multiply`` chain NNCF writes, evaluated."""
    kind = node.get_type_name()
    if kind == "Constant":
        data = np.asarray(node.get_data())
        return data.astype(np.float64), data.dtype in (np.int8, np.uint8)
    if kind == "Convert":
        return stored_weight(source(node.input(0)))
    if kind in ("Multiply", "Subtract", "Add"):
        (a, ia), (b, ib) = (stored_weight(source(node.input(k))) for k in range(2))
        value = a * b if kind == "Multiply" else a - b if kind == "Subtract" else a + b
        return value, ia or ib
    if kind in ("Concat", "Split", "VariadicSplit", "Reshape", "Transpose"):
        # the frontend's own float re-arrangement of a float weight (not quantized): the
        # reference keeps the case's weights there
        return np.empty(0), False
    raise AdapterFault(f"a recurrent weight made by {kind}: the harness reads Constant, "
                       f"Convert, Subtract and Multiply")


class OpenVINONNCFInt8(OpenVINO):
    name = "openvino-nncf-int8"
    title = "the ONNX LSTM/GRU graph in OpenVINO, static int8 by NNCF (CPU plugin)"
    framework = "openvino"
    requires = ("onnx", "openvino", "nncf")
    named_only = "NNCF's calibration and the compilation cost seconds a model"
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

    def not_applicable_reason(self, case: Case) -> str | None:
        if case.quantization is None:
            return f"{self.name}: {NOT_QUANTIZED_CASE}"
        return super().not_applicable_reason(case)

    def check_available(self) -> None:
        super().check_available()
        import_nncf()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "nncf": import_nncf().__version__,
                "scheme": "static int8 (nncf.quantize, default preset)"}

    def quantize(self, case: Case, native: dict[str, np.ndarray]):
        """The NNCF-quantized ov.Model of the case's graph."""
        nncf = import_nncf()
        self.core()
        model = build_model(case, native, lengths=False)
        ov_model = self._frontend.convert(self._frontend.load(io.BytesIO(
            model.SerializeToString())))
        zeros = np.zeros((case.num_layers * case.num_directions, case.batch, case.hidden_size))
        c0 = zeros if case.cell_kind.has_cell_state else None
        names = {port.get_any_name() for port in ov_model.inputs}
        batches = [{k: v.astype(np.float32) for k, v in feeds(
            case, Inputs(x=x, h0=zeros, c0=c0, seq_lengths=None)).items() if k in names}
            for x in calibration_inputs(case)]
        return nncf.quantize(ov_model, nncf.Dataset(batches), subset_size=len(batches))

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        ov, _ = import_openvino()
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
        for layer, op in enumerate(ops):
            g = fake_quantize_grid(fq[layer])
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
