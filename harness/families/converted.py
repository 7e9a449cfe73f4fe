"""The ``tflite`` and ``executorch`` families: adapters that run a converted model (the LiteRT
ones, ExecuTorch). How they run it (:func:`run_tensors`: a LiteRT interpreter fed tensor by
tensor; :func:`run_program`: an ExecuTorch program's method) is pasted into their reproducers
(:func:`source`) with how they read its outputs (:mod:`harness.families.readout`), so that a
script runs the model beside it by the very code the adapter ran. The pasted part takes the
runtime's objects as arguments: this module imports nothing of a framework. :data:`TFLITE`
and :data:`EXECUTORCH` are the scripts' framework parts around it.
"""

from __future__ import annotations

from harness.families import readout
from harness.families.paste import Family, below

MARKER = "# --- a converted model run as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


TFLITE_SCRIPT = '''import importlib.metadata  # noqa: E402

from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

MODEL = os.path.join(HERE, "model.tflite")
FEEDS = {name: HANDED["feed/" + name] for name in CALL["inputs"]}
ABSENT = CALL["absent"]


def framework_versions():
    return {"ai_edge_litert": importlib.metadata.version("ai-edge-litert")}


def device():
    return f"CPU, LiteRT interpreter ({CALL['op_resolver'] or 'default'} op resolver)"


def run_model():
    """The model's outputs by name, run as the harness ran it: under CALL's op resolver (None:
    the interpreter's default), through its one signature fed by keyword, or input tensor by
    input tensor (run_tensors, above)."""
    kwargs = {}
    if CALL["op_resolver"] is not None:
        kwargs["experimental_op_resolver_type"] = getattr(OpResolverType, CALL["op_resolver"])
    with open(MODEL, "rb") as f:
        interpreter = Interpreter(model_content=f.read(), **kwargs)
    if CALL["runner"] == "signature":
        return dict(interpreter.get_signature_runner()(**FEEDS))
    interpreter.allocate_tensors()
    return run_tensors(interpreter, FEEDS)


def run_framework():
    """y per layer, h_n, c_n (float64) from the model's outputs by their roles (readout,
    above); h_n read from y where the model outputs y only and y determines it."""
    ys, h_n, c_n = readout(run_model(), CALL["roles"], SPEC["num_layers"])
    if h_n is None and CALL["h_n"] == "from_y":
        h_n = h_n_from_y(ys[SPEC["num_layers"] - 1], SPEC["directions"], SPEC["hidden_size"])
    return ys, h_n, c_n
'''

EXECUTORCH_SCRIPT = '''import importlib.metadata  # noqa: E402

import torch  # noqa: E402
from executorch.runtime import Runtime, Verification  # noqa: E402

MODEL = os.path.join(HERE, "model.pte")
FEEDS = {name: HANDED["feed/" + name] for name in CALL["inputs"]}
ABSENT = CALL["absent"]


def framework_versions():
    return {"torch": torch.__version__, "executorch": importlib.metadata.version("executorch")}


def device():
    kernels = (f"{CALL['delegate'].upper()} delegate and portable kernels" if CALL["delegate"]
               else "portable kernels only")
    return f"CPU, ExecuTorch runtime ({kernels})"


def run_framework():
    """y, h_n, c_n (float64) from the program's outputs by their roles (readout, above): its
    method run as the harness ran it (run_program, above), loaded from the bytes of model.pte,
    its inputs as torch tensors in CALL's order."""
    with open(MODEL, "rb") as f:
        got = run_program(torch, Runtime.get(), getattr(Verification, CALL["verification"]),
                          f.read(), CALL["method"],
                          [torch.from_numpy(np.ascontiguousarray(FEEDS[name]))
                           for name in CALL["inputs"]])
    return readout(got, CALL["roles"], SPEC["num_layers"])
'''

TFLITE = Family(
    "tflite", framework=lambda call: TFLITE_SCRIPT,
    needs=lambda call: "ai-edge-litert (pip install ai-edge-litert)",
    pasted=(readout.source, source),
    trackers={"litert": "https://github.com/google-ai-edge/LiteRT/issues",
              "litert-torch": "https://github.com/google-ai-edge/litert-torch/issues"},
    converted=("model.tflite", "the converted model the LiteRT interpreter ran"))

EXECUTORCH = Family(
    "executorch", framework=lambda call: EXECUTORCH_SCRIPT,
    needs=lambda call: "PyTorch and ExecuTorch (pip install torch executorch)",
    pasted=(readout.source, source),
    trackers={"executorch": "https://github.com/pytorch/executorch/issues"},
    converted=("model.pte", "the ExecuTorch program the runtime ran"))


# --- a converted model run as the harness runs it (pasted into repro.py) ---
def run_tensors(interpreter, feeds):
    """The outputs by tensor name of a LiteRT ``interpreter`` (tensors allocated), fed input
    tensor by input tensor (``feeds``: name -> array, in the order set), then invoked."""
    by_name = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    for name, value in feeds.items():
        interpreter.set_tensor(by_name[name], value)
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"])
            for d in interpreter.get_output_details()}


def run_program(torch, runtime, verification, program, method, inputs):
    """The outputs by position (``"0"``, ``"1"``, ...; float64 NumPy) of ``method`` of the
    ExecuTorch ``program`` (bytes) loaded by ``runtime`` under ``verification``, called with
    ``inputs`` (torch tensors)."""
    got = runtime.load_program(program, verification=verification).load_method(
        method).execute(inputs)
    return {str(k): g.detach().to(torch.float64).numpy() for k, g in enumerate(got)}
