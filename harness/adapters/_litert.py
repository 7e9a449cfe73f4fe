"""What the Keras -> LiteRT adapters share: the Keras stack of :mod:`harness.adapters._keras`
(layout ``keras``) traced as one ``tf.function`` at the case's batch and length, converted by
TensorFlow's ``tf.lite.TFLiteConverter`` and run in the LiteRT interpreter
(``ai_edge_litert.interpreter.Interpreter``, its default CPU kernels and XNNPACK delegate).

The weights are constants of the converted model, as in a deployed ``.tflite`` (the Keras
variables are frozen by the converter); the data are its inputs: ``x`` [B, T, I], one [B, H]
``h0_{s}`` (and ``c0_{s}``) per layer and direction s in the harness order, and ``mask``
[B, T] bool where the case has lengths. Its outputs are every layer's ``y`` and every final
state (:func:`output_names`).

Which form the converter emitted is read from the converted model's ops (the main subgraph,
before the interpreter applies its delegate) and said in each pair's reason
(``Outputs.note``): the fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` / ``BIDIRECTIONAL_SEQUENCE_LSTM``
kernels, a ``WHILE`` loop over the cell's ops, or (``unroll=True``) the steps unrolled. With
TensorFlow 2.21 a ``tf.function`` converted by ``from_concrete_functions`` becomes a ``WHILE``
loop for tf_keras and Keras 3 layers alike (docs/layouts.md, keras, "LiteRT"): the fused kernel
is emitted only through the SavedModel route (``from_keras_model``), for a tf_keras LSTM whose
final states are not outputs, at seconds per layer (:data:`ROUTES`).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np

from harness.adapters._keras import forward, load_native, make_layers, valid_mask
from harness.adapters.base import AdapterFault
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.spec import Case

FUSED_OPS = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM")

# How the traced function reaches the converter. ``concrete``: frozen in memory (variables to
# constants, grappler inlining the Keras layer's function), 0.2-1 s a model. ``saved_model``:
# written as a SavedModel to a temporary folder first (what ``from_keras_model`` does), which
# keeps the ``api_implements`` attribute the converter fuses an LSTM by; 2-13 s a model.
ROUTES = ("concrete", "saved_model")


def import_litert():
    """The LiteRT Interpreter class, or Unavailable."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:
        raise Unavailable(f"ai-edge-litert is not installed ({exc}); "
                          "pip install ai-edge-litert") from None
    return Interpreter


def litert_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("ai_edge_litert")


def form_of(ops: list[str]) -> str:
    """The form of a converted RNN from the op names of its main subgraph."""
    fused = sorted({op for op in ops if op in FUSED_OPS})
    if fused:
        return "fused " + " + ".join(fused)
    if "WHILE" in ops:
        return "WHILE loop"
    return "unrolled"


def main_ops(Interpreter: Any, model: bytes) -> list[str]:
    """Op names of the main subgraph, in execution order, before any delegate replaces them."""
    return [op["op_name"] for op in Interpreter(model_content=model)._get_ops_details()]


def signature(case: Case, tf: Any) -> list[Any]:
    """The converted function's inputs (TensorSpecs, named as the signature runner knows them)."""
    dtype = tf.as_dtype(case.dtype)
    B, T, H = case.batch, case.seq_len, case.hidden_size
    n = case.num_layers * case.num_directions
    specs = [tf.TensorSpec((B, T, case.input_size), dtype, name="x")]
    specs += [tf.TensorSpec((B, H), dtype, name=f"h0_{s}") for s in range(n)]
    if case.cell == "lstm":
        specs += [tf.TensorSpec((B, H), dtype, name=f"c0_{s}") for s in range(n)]
    if case.seq_lengths is not None:
        specs.append(tf.TensorSpec((B, T), tf.bool, name="mask"))
    return specs


def convert(K: Any, tf: Any, case: Case, native: dict[str, np.ndarray], *, activation: str,
            layer_kwargs: dict[str, Any] | None = None, route: str = "concrete") -> bytes:
    """The ``.tflite`` flatbuffer of the case's stack (weights ``native`` as constants)."""
    from harness.dtypes import FORMATS

    assert route in ROUTES, route
    lstm = case.cell == "lstm"
    n = case.num_layers * case.num_directions
    layers = make_layers(K, case, activation=activation, layer_kwargs=layer_kwargs)
    load_native(case, layers, native, FORMATS[case.dtype].numpy)
    masked = case.seq_lengths is not None

    def stack(x, *rest):
        h0, rest = list(rest[:n]), rest[n:]
        c0, rest = (list(rest[:n]), rest[n:]) if lstm else ([], rest)
        mask = rest[0] if masked else None
        _, h_n, c_n, y_layers = forward(tf, case, layers, x, h0, c0, mask)
        return [*y_layers, *h_n, *c_n]  # the order output_names says

    module = tf.Module()
    module.layers = layers  # tracked: the SavedModel route saves the variables with it
    module.stack = tf.function(stack, input_signature=signature(case, tf))
    concrete = module.stack.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    converter.experimental_lower_to_saved_model = route == "saved_model"
    with quiet_converter(tf):
        return converter.convert()


@contextlib.contextmanager
def quiet_converter(tf: Any):
    """The converter logs its passes through absl/TF logging at INFO and WARNING: errors only."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def output_names(case: Case) -> list[str]:
    """The converted function's outputs in order: every layer's y, then h_n, then c_n per
    layer and direction."""
    n = case.num_layers * case.num_directions
    return ([f"y_{k}" for k in range(case.num_layers)] + [f"h_n_{s}" for s in range(n)]
            + ([f"c_n_{s}" for s in range(n)] if case.cell == "lstm" else []))


def outputs_by_name(case: Case, interpreter: Any) -> dict[str, np.ndarray]:
    """The interpreter's outputs (float64) keyed by :func:`output_names`. A frozen function's
    k-th output is the tensor named ``Identity_k`` (``Identity`` for the first); the
    interpreter lists them in its own order."""
    names = output_names(case)
    got = {}
    for d in interpreter.get_output_details():
        k = 0 if d["name"] == "Identity" else int(d["name"].removeprefix("Identity_"))
        got[names[k]] = np.asarray(interpreter.get_tensor(d["index"]), dtype=np.float64)
    if sorted(got) != sorted(names):
        raise AdapterFault(f"the converted model's outputs are {sorted(got)}, expected {names}")
    return got


def feeds(case: Case, inputs: Inputs) -> dict[str, np.ndarray]:
    """The signature runner's inputs, named as in :func:`signature`, in the case dtype."""
    from harness.dtypes import FORMATS

    np_dtype = FORMATS[case.dtype].numpy
    out = {"x": np.ascontiguousarray(inputs.x, dtype=np_dtype)}
    out |= {f"h0_{s}": np.ascontiguousarray(h, dtype=np_dtype) for s, h in enumerate(inputs.h0)}
    if case.cell == "lstm":
        out |= {f"c0_{s}": np.ascontiguousarray(c, dtype=np_dtype)
                for s, c in enumerate(inputs.c0)}
    if case.seq_lengths is not None:
        out["mask"] = valid_mask(inputs)
    return out


def run_litert(K: Any, tf: Any, case: Case, native: dict[str, np.ndarray], inputs: Inputs, *,
               activation: str, layer_kwargs: dict[str, Any] | None = None,
               route: str = "concrete") -> Outputs:
    """Convert (:func:`convert`) and run the case in the LiteRT interpreter; the form the
    converter emitted is in ``Outputs.note``."""
    Interpreter = import_litert()
    model = convert(K, tf, case, native, activation=activation, layer_kwargs=layer_kwargs,
                    route=route)
    ops = main_ops(Interpreter, model)
    interpreter = Interpreter(model_content=model)
    interpreter.allocate_tensors()
    by_name = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    for name, value in feeds(case, inputs).items():
        interpreter.set_tensor(by_name[name], value)
    interpreter.invoke()
    got = outputs_by_name(case, interpreter)
    n = case.num_layers * case.num_directions
    y_layers = [got[f"y_{k}"] for k in range(case.num_layers)]
    return Outputs(
        y=y_layers[-1],
        h_n=np.stack([got[f"h_n_{s}"] for s in range(n)]),
        c_n=np.stack([got[f"c_n_{s}"] for s in range(n)]) if case.cell == "lstm" else None,
        y_layers=y_layers,
        note=f"LiteRT ran the {form_of(ops)} form (converted ops: {', '.join(dict.fromkeys(ops))};"
             f" converter route {route})",
    )
