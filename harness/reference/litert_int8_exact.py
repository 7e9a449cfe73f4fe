"""A converted full-integer model run by the LiteRT interpreter beside the integer reference
(:mod:`harness.reference.litert_int8_lstm`), compared to the bit: for every tensor an op
writes, how many values differ at each step.

The interpreter keeps every tensor (``experimental_preserve_all_tensors``), so that a
difference is found where it starts (the quantized input, one LSTM op, a copy) and not only in
the model's output.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from harness.frameworks import litert_flatbuffer
from harness.frameworks.litert import import_litert
from harness.reference.litert_int8_lstm import ModelRun, run_model
from harness.reference.step_differences import StepDifferences


@dataclass(frozen=True)
class TensorDifference(StepDifferences):
    """One tensor an op wrote, against the reference (:class:`StepDifferences`)."""

    op: int
    op_name: str
    tensor: int
    tensor_name: str

    def words(self) -> str:
        return (f"op {self.op} {self.op_name} tensor {self.tensor} ({self.tensor_name}): "
                f"{self.counted()} (up to {self.max_steps} steps; {self.steps() or 'none'})")


def interpreter_tensors(model: bytes, x: np.ndarray, op_resolver: str | None
                        ) -> dict[int, np.ndarray]:
    """Every tensor the interpreter wrote running ``model`` on ``x`` under ``op_resolver`` (an
    ``OpResolverType`` name; None: the default), by tensor index."""
    Interpreter = import_litert()
    from ai_edge_litert.interpreter import OpResolverType

    kwargs = {} if op_resolver is None else {
        "experimental_op_resolver_type": getattr(OpResolverType, op_resolver)}
    with warnings.catch_warnings():  # "intended for debugging purposes only": it is that
        warnings.simplefilter("ignore", UserWarning)
        interpreter = Interpreter(model_content=model, experimental_preserve_all_tensors=True,
                                  **kwargs)
    interpreter.allocate_tensors()
    [feed] = interpreter.get_input_details()
    interpreter.set_tensor(feed["index"], np.asarray(x, dtype=np.float32))
    interpreter.invoke()
    flat = litert_flatbuffer.read(model)
    return {o: np.array(interpreter.get_tensor(o)) for op in flat.ops for o in op.outputs}


def compare(model: bytes, x: np.ndarray, op_resolver: str | None = "BUILTIN_REF"
            ) -> tuple[list[TensorDifference], ModelRun]:
    """The interpreter under ``op_resolver`` and the integer reference on the same float input
    ``x`` [B, T, I] (batch-major, the adapters' models): one :class:`TensorDifference` per
    tensor an op writes, in op order, and the reference's run."""
    flat = litert_flatbuffer.read(model)
    ran = interpreter_tensors(model, x, op_resolver)
    reference = run_model(model, x)
    found = []
    for n, op in enumerate(flat.ops):
        for o in op.outputs:
            got, want = ran[o], reference.tensors[o]
            if got.dtype.kind == "f":  # a float tensor: how many of its values differ
                apart = (got != want).astype(np.int64)
            else:
                apart = np.abs(got.astype(np.int64) - want)
            steps = apart.reshape(apart.shape[0], apart.shape[1], -1) if apart.ndim >= 2 \
                else apart.reshape(1, 1, -1)
            found.append(TensorDifference(
                n, op.name, o, flat.subgraph.tensors[o].name.decode(errors="replace"),
                differing=tuple(int(k) for k in (steps != 0).sum(axis=(0, 2))),
                per_step=int(steps.shape[0] * steps.shape[2]),
                max_steps=int(apart.max(initial=0))))
    return found, reference


def bit_exact(model: bytes, x: np.ndarray, got: np.ndarray) -> str:
    """Words on an int8 kernel's output ``got`` (``model`` run on ``x``) against the integer
    reference of LiteRT's 8x8->16 LSTM kernel: "" where that reference does not model the
    file."""
    from harness.reference.litert_int8_lstm import NotModelled

    try:
        ran = run_model(model, x)
    except NotModelled:
        return ""
    same = np.array_equal(np.asarray(ran.output, dtype=np.float64), got)
    return ("bit-exact against the integer reference of LiteRT's int8 LSTM kernel" if same
            else "differs from the integer reference of LiteRT's int8 LSTM kernel (max "
                 f"{float(np.max(np.abs(ran.output - got))):.3g})")
