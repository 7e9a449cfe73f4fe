"""A ``.tflite`` file run as it is in the LiteRT interpreter, and one op of it (or a layer's
few ops) cut out as a ``.tflite``: what the ``litert-shipped`` adapter and compare's
shipped-outputs judge (:mod:`harness.models.tflite_run`) both run a shipped file with."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.frameworks.tflite_tensors import from_file as _from_file
from harness.frameworks.tflite_tensors import to_file as _to_file


def interpreter(model: bytes, preserve: bool = False) -> Any:
    """The LiteRT interpreter on ``model``, its tensors allocated (``preserve``: every
    intermediate tensor kept)."""
    from harness.frameworks.litert import import_litert
    from harness.frameworks.tf import native_stderr_to_scratch

    Interpreter = import_litert()
    with native_stderr_to_scratch():  # the "Created ... XNNPACK delegate" line
        interpreter = Interpreter(model_content=model,
                                  experimental_preserve_all_tensors=preserve)
        interpreter.allocate_tensors()
    return interpreter


def interpret(model: bytes, x: np.ndarray) -> np.ndarray:
    """The file's one output on its one input ``x``, in the LiteRT interpreter (an integer
    input is quantized on its grid, an integer output dequantized on its own)."""
    run = interpreter(model)
    [given] = run.get_input_details()
    run.set_tensor(given["index"], _to_file(given, x))
    run.invoke()
    [out] = run.get_output_details()
    return _from_file(out, run.get_tensor(out["index"]))


def cut(model: bytes, index: int, ops: tuple[int, ...] = ()) -> bytes:
    """The op ``index`` of the main subgraph alone, as a one-op ``.tflite``: the file's own op,
    tensors, buffers and grids; its input the op's input 0, its output the op's output 0. With
    ``ops`` (``index`` among them), those ops in the file's order, its input op ``index``'s
    input 0, its output the last op's output 0 (a layer of several ops: a Keras
    Bidirectional's two fused LSTMs, their REVERSE_V2s and CONCATENATION)."""
    import flatbuffers

    from harness.frameworks import litert_flatbuffer as fb

    m = fb._schema().ModelT.InitFromPackedBuf(model, 0)
    sg = m.subgraphs[0]
    kept = [sg.operators[n] for n in sorted(ops or (index,))]
    x = sg.operators[index].inputs[0]
    sg.operators, sg.inputs, sg.outputs = kept, [x], [kept[-1].outputs[0]]
    m.signatureDefs = []  # they name the whole model's inputs and outputs
    b = flatbuffers.Builder(len(model) + 1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())
