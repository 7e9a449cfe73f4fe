"""The ``onnx`` family: how the adapters that run an ONNX graph (onnxruntime, openvino,
onnx-reference, and torch.onnx's exports run in ONNX Runtime) run the model's bytes in their
runtime (:func:`run_onnxruntime`, :func:`run_openvino`, :func:`run_onnx_reference`) and read
its outputs back (:func:`read_graph_outputs`), pasted into their reproducers (:func:`source`)
so that a script runs the graph by the very code the adapter ran. The pasted part takes the
runtime's modules as arguments: this module imports NumPy only. :data:`FAMILY` is the
script's framework part around it, one text per runtime (:data:`RUNTIMES`).
"""

from __future__ import annotations

from harness.families.paste import Family, below

MARKER = "# --- an ONNX graph as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


SCRIPT = '''MODEL = os.path.join(HERE, "model.onnx")
FEEDS = {{name[len("feed/"):]: v for name, v in HANDED.items() if name.startswith("feed/")}}

{runtime}

def run_framework():
    """Each layer's Y as [N, T, D*H], the final states as [layers * D, N, H], float64."""
    with open(MODEL, "rb") as f:
        got = run_model(f.read())
    L, lstm = SPEC["num_layers"], SPEC["has_cell_state"]
    if CALL.get("read") == "module":  # an exported nn.LSTM / nn.GRU: y, h_n (, c_n)
        values = [np.asarray(got[name], dtype=np.float64) for name in CALL["outputs"]]
        return {{L - 1: values[0]}}, values[1], (values[2] if lstm else None)
    ys, h_n, c_n = read_graph_outputs(got, CALL["y_axes"], CALL["state_axes"], SPEC["batch"],
                                      SPEC["seq_len"], L, lstm)
    return dict(enumerate(ys)), h_n, c_n
'''

RUNTIMES = {
    "onnxruntime": ('''import onnxruntime as ort  # noqa: E402


def framework_versions():
    return {"onnxruntime": ort.__version__}


def device():
    return "CPUExecutionProvider"


def run_model(model):
    return run_onnxruntime(ort, model, FEEDS)
''', "ONNX Runtime (pip install onnxruntime)"),
    "openvino": ('''# as the harness ran it: without openvino_telemetry, which ``import openvino``
# would use to send a usage event and write a client id under ~/intel
sys.modules.setdefault("openvino_telemetry", None)
import openvino as ov  # noqa: E402
from openvino.frontend import FrontEndManager  # noqa: E402


def framework_versions():
    return {"openvino": ov.__version__}


def device():
    return "CPU plugin " + ov.Core().get_property("CPU", "FULL_DEVICE_NAME")


def run_model(model):
    return run_openvino(ov.Core(), FrontEndManager().load_by_framework("onnx"), model,
                        CALL["compile_config"], FEEDS)
''', "OpenVINO (pip install openvino)"),
    "onnx-reference": ('''import onnx  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def framework_versions():
    return {"onnx": onnx.__version__}


def device():
    return "onnx.reference (NumPy)"


def run_model(model):
    return run_onnx_reference(onnx, ReferenceEvaluator, model, FEEDS)
''', "onnx (pip install onnx)"),
}

FAMILY = Family(
    "onnx", framework=lambda call: SCRIPT.format(runtime=RUNTIMES[call["runtime"]][0]),
    needs=lambda call: RUNTIMES[call["runtime"]][1], pasted=(source,),
    choices={"runtime": tuple(RUNTIMES)},
    trackers={"torch.onnx": "https://github.com/pytorch/pytorch/issues",
              "onnxruntime": "https://github.com/microsoft/onnxruntime/issues",
              "openvino": "https://github.com/openvinotoolkit/openvino/issues",
              "onnx-reference": "https://github.com/onnx/onnx/issues"},
    # OpenVINO's bug form pre-fills "[Bug]: "
    title_prefix={"openvino": "[Bug]: ", "torch.onnx": "[ONNX] "})


# --- an ONNX graph as the harness runs it (pasted into repro.py) ---
import io  # noqa: E402

import numpy as np  # noqa: E402


def run_onnxruntime(ort, model, feeds):
    """The graph's outputs by name: ``model`` (bytes) in an ONNX Runtime session on the CPU
    provider, errors only in its log (ORT warns about unused initializers etc.)."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def run_openvino(core, frontend, model, config, feeds):
    """The graph's outputs by name: ``model`` (bytes) read by OpenVINO's ONNX ``frontend``,
    compiled by ``core`` for its CPU plugin with ``config`` (the inference precision pinned:
    its default on a CPU with bf16 is bf16)."""
    compiled = core.compile_model(frontend.convert(frontend.load(io.BytesIO(model))), "CPU",
                                  config)
    return {port.get_any_name(): value for port, value in compiled(feeds).items()}


def run_onnx_reference(onnx, evaluator_cls, model, feeds):
    """The graph's outputs by name: ``model`` (bytes) evaluated by
    ``onnx.reference.ReferenceEvaluator`` (``evaluator_cls``)."""
    evaluator = evaluator_cls(onnx.load_from_string(model))
    names = list(evaluator.output_names)
    return dict(zip(names, evaluator.run(names, feeds), strict=True))


def read_graph_outputs(got, y_axes, state_axes, batch, seq_len, num_layers, lstm):
    """(each layer's y [N, T, D*H], h_n, c_n) as float64 from the graph's outputs ``Y{k}``,
    ``Y_h{k}`` (``Y_c{k}``) by name, their axes named by the letters ``y_axes`` (of NTDH) and
    ``state_axes`` (of DNH): the direction axis becomes features, the states [D, N, H]
    concatenated over layers."""
    def axes(name, src, dst):
        return np.transpose(np.asarray(got[name], dtype=np.float64),
                            [src.index(letter) for letter in dst])

    ys = [axes(f"Y{k}", y_axes, "NTDH").reshape(batch, seq_len, -1) for k in range(num_layers)]
    h_n = np.concatenate([axes(f"Y_h{k}", state_axes, "DNH") for k in range(num_layers)])
    c_n = (np.concatenate([axes(f"Y_c{k}", state_axes, "DNH") for k in range(num_layers)])
           if lstm else None)
    return ys, h_n, c_n
