"""Which int8 quantizers quantize the recurrent op: ONNX Runtime's static QDQ quantizer and NNCF,
on the harness's own ONNX ``LSTM`` / ``GRU`` graph (docs/quantization.md, "ONNX Runtime QDQ and
OpenVINO NNCF: measured, not built").

For each case (the shapes of ``cases-quantized/``, and a GRU with ``linear_before_reset=0``,
which NNCF treats apart: openvinotoolkit/nncf#2105, PR#2115) and each path:

- ``ort-qdq``: ``onnxruntime.quantization.quantize_static`` (QDQ, int8 activations and weights)
  with its default operator types; ``ort-qdq named``: the same with the recurrent op named in
  ``op_types_to_quantize``;
- ``nncf onnx``: ``nncf.quantize`` on the ONNX model; ``nncf openvino``: ``nncf.quantize`` on the
  ``ov.Model`` OpenVINO's ONNX frontend reads from it, compiled for the CPU plugin.

Calibration: ``harness.quantization.calibration_inputs`` (the case's own input distribution at
its batch and sequence length), zero initial states, as deployed. Columns: what feeds the
recurrent node (its weights int8 or float, Q/DQ or FakeQuantize on its data inputs), the
precision the runtime runs the recurrent op in (ORT: the op after session optimisation; OpenVINO:
the CPU plugin's ``runtimePrecision`` of ``RNNSeq``), and the SQNR of ``y`` against the float64
reference (harness.quantization.sqnr_db; inf: identical).

    PYTHONPATH=. python benchmarks/quantizer_coverage.py
    python benchmarks/quantizer_coverage.py --smoke      # tiny shapes, two cases
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import logging
import tempfile
import traceback
from pathlib import Path

import numpy as np
from _common import print_facts, table

from harness import quantization
from harness.adapters import get_adapter
from harness.cpu_flags import cpu_flags
from harness.data import Inputs
from harness.frameworks.onnx import build_model, feeds, read_outputs
from harness.prepare import prepare
from harness.spec import Case

QUANTIZED = dict(input_size=32, hidden_size=32, batch=2, seq_len=8, seed=43,
                 quantization={"calibration_batches": 8})  # cases-quantized/quantized.yaml
SMOKE = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, seed=5,
             quantization={"calibration_batches": 2})
RECURRENT = ("LSTM", "GRU", "LSTMSequence", "GRUSequence")


def cases(smoke: bool) -> list[Case]:
    shape = SMOKE if smoke else QUANTIZED
    kinds = ([("lstm", "forward", True), ("gru", "forward", False)] if smoke else
             [("lstm", "forward", True), ("lstm", "bidirectional", True),
              ("gru", "forward", True), ("gru", "bidirectional", True),
              ("gru", "forward", False), ("gru", "bidirectional", False)])
    return [Case(name=f"{cell}-{direction}" + ("" if reset_after else "-lbr0"), cell=cell,
                 direction=direction, dtype="float32", reset_after=reset_after, **shape)
            for cell, direction, reset_after in kinds]


def calibration_feeds(case: Case) -> list[dict[str, np.ndarray]]:
    """The calibration batches as the graph's feeds, zero initial states (as deployed)."""
    zeros = np.zeros((case.num_layers * case.num_directions, case.batch, case.hidden_size))
    c0 = zeros if case.cell_kind.has_cell_state else None
    return [{k: v.astype(np.float32) for k, v in
             feeds(case, Inputs(x=x, h0=zeros, c0=c0, seq_lengths=None)).items()}
            for x in quantization.calibration_inputs(case)]


def ort_qdq(case: Case, model, named: bool, folder: Path) -> tuple[str, str, np.ndarray]:
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(calibration_feeds(case))

        def get_next(self):
            return next(self.batches, None)

    source, target = folder / "float.onnx", folder / "qdq.onnx"
    onnx.save(model, source)
    op = model.graph.node[0].op_type
    quantize_static(source, target, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=[op] if named else None)
    quantized = onnx.load(target)
    made = {o: n for n in quantized.graph.node for o in n.output}
    ints = {i.name for i in quantized.graph.initializer if i.data_type != onnx.TensorProto.FLOAT}
    node = next(n for n in quantized.graph.node if n.op_type in RECURRENT)
    parts = []
    for name in node.input[1:3]:  # W, R
        dq = made.get(name)
        parts.append(f"{name.split('_')[0]} int8 via DequantizeLinear"
                     if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in ints
                     else f"{name} float")
    data = made.get(node.input[0])
    parts.append("X via Q/DQ" if data is not None and data.op_type == "DequantizeLinear"
                 else "X float")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.optimized_model_filepath = str(folder / "optimized.onnx")
    session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath)
    runs = next(n for n in optimized.graph.node if n.op_type in RECURRENT)
    kernel_in = {o: n.op_type for n in optimized.graph.node for o in n.output}
    feeding = sorted({kernel_in.get(i, "graph inputs") for i in runs.input if i})
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, feeds(case, prepared(case).inputs)), strict=True))
    return ", ".join(parts), f"{runs.op_type} (float kernel) fed by {', '.join(feeding)}", \
        read_outputs(case, got).y


def nncf_onnx(case: Case, model, folder: Path) -> tuple[str, str, np.ndarray]:
    import nncf
    import onnx
    import onnxruntime as ort

    quantized = nncf.quantize(model, nncf.Dataset(calibration_feeds(case)),
                              subset_size=case.quantization.calibration_batches)
    counts = collections.Counter(n.op_type for n in quantized.graph.node)
    ints = [i.name for i in quantized.graph.initializer if i.data_type != onnx.TensorProto.FLOAT]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(quantized.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, feeds(case, prepared(case).inputs)), strict=True))
    held = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))
    return (f"graph: {held}; integer initializers: {len(ints)}", "ONNX Runtime, float kernel",
            read_outputs(case, got).y)


def nncf_openvino(case: Case, model, folder: Path) -> tuple[str, str, np.ndarray]:
    import nncf
    import onnx
    import openvino as ov

    path = folder / "float.onnx"
    onnx.save(model, path)
    core = ov.Core()
    float_model = core.read_model(str(path))
    names = [i.get_any_name() for i in float_model.inputs]
    quantized = nncf.quantize(float_model, nncf.Dataset(
        [{n: f[n] for n in names} for f in calibration_feeds(case)]),
        subset_size=case.quantization.calibration_batches)
    parts = []
    for op in quantized.get_ordered_ops():
        if op.get_type_name() not in RECURRENT:
            continue
        chains = []
        for k in range(op.get_input_size()):
            if not op.input(k).get_element_type().is_real():
                continue  # the sequence lengths: a shape, not data
            src, chain = op.input(k).get_source_output().get_node(), []
            while True:  # walk back through the data movement to what makes the input
                chain.append(src.get_type_name())
                if src.get_type_name() in ("Parameter", "Constant") or not src.inputs():
                    break
                src = src.input(0).get_source_output().get_node()
            if "FakeQuantize" in chain:
                chains.append(f"in{k} FakeQuantize")
            elif chain[-1] == "Constant" and src.get_output_element_type(0) == ov.Type.i8:
                chains.append(f"in{k} int8 constant")
        parts.append(f"{op.get_type_name()}: {', '.join(chains) or 'float inputs only'}")
    compiled = core.compile_model(quantized, "CPU")
    precision = sorted({f"{o.get_rt_info()['layerType'].astype(str)} "
                        f"{o.get_rt_info()['runtimePrecision'].astype(str)}"
                        for o in compiled.get_runtime_model().get_ordered_ops()
                        if o.get_rt_info()["layerType"].astype(str) == "RNNSeq"})
    result = compiled(feeds(case, prepared(case).inputs))
    got = {port.get_any_name(): value for port, value in result.items()}
    return "; ".join(parts), ", ".join(precision), read_outputs(case, got).y


_PREPARED: dict[str, object] = {}


def prepared(case: Case):
    if case.name not in _PREPARED:
        _PREPARED[case.name] = prepare(case)
    return _PREPARED[case.name]


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, two cases")
    args = ap.parse_args()
    logging.getLogger("nncf").setLevel(logging.ERROR)
    flags = cpu_flags()
    print_facts([(d, version(d)) for d in ("onnx", "onnxruntime", "openvino", "nncf")]
                + [("cpu flags", ", ".join(flags["flags"]) or "none of the integer-relevant")])
    paths = {
        "ort-qdq": lambda c, m, f: ort_qdq(c, m, False, f),
        "ort-qdq named": lambda c, m, f: ort_qdq(c, m, True, f),
        "nncf onnx": nncf_onnx,
        "nncf openvino": nncf_openvino,
    }
    rows = []
    adapter = get_adapter("onnxruntime")
    for case in cases(args.smoke):
        p = prepared(case)
        native = adapter.layout.to_native(p.canonical, case, adapter.native_dtype(case))
        for path, run in paths.items():
            with tempfile.TemporaryDirectory() as folder:
                try:
                    feeding, runs, y = run(case, build_model(case, native, lengths=False),
                                           Path(folder))
                    sqnr = f"{float(quantization.sqnr_db(y, p.reference.y)):.1f}"
                except ImportError as exc:
                    feeding, runs, sqnr = f"not installed ({exc.name})", "", ""
                except Exception as exc:  # a quantizer that fails is a row, the others go on
                    last = traceback.format_exception_only(exc)[-1].strip()
                    feeding, runs, sqnr = f"failed: {last[:160]}", "", ""
            rows.append([case.name, path, feeding, runs, sqnr])
    print(table(rows, ["case", "path", "what feeds the recurrent op", "runs as", "SQNR y dB"]))


if __name__ == "__main__":
    main()
