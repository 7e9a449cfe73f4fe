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
final states are not outputs, at seconds per layer (:data:`ROUTE`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

import numpy as np

from harness.adapters._keras import KerasLibraryAdapter, forward, valid_mask
from harness.adapters.base import AdapterFault
from harness.data import Inputs, Outputs
from harness.families.converted import run_tensors
from harness.families.readout import readout
from harness.frameworks.keras import load_native, make_layers
from harness.frameworks.litert import import_litert
from harness.frameworks.tf import native_stderr_to_scratch
from harness.handed import Handed
from harness.spec import Case

FUSED_OPS = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM")

# The traced function reaches the converter frozen in memory (variables to constants, grappler
# inlining the Keras layer's function): 0.2-9 s a model. The SavedModel route (what
# ``from_keras_model`` does: written to a temporary folder first, which keeps the
# ``api_implements`` attribute the converter fuses an LSTM by) took 2-16 s a model, and fused only
# layers whose final states are not outputs, which the harness compares.
ROUTE = "TFLiteConverter.from_concrete_functions (frozen in memory)"

# Found by converting the bundled cases (TensorFlow 2.21, ai-edge-litert 2.3): the builtin
# kernels are float32; a float16 or float64 graph keeps its ops as TF ops the builtin runtime
# does not have, and bfloat16 is refused outright.
DTYPE_REASON = ("TFLiteConverter: float32 only; a float64 or float16 LSTM/GRU graph fails with "
                "\"'tf.Transpose' op is neither a custom op nor a flex op ... Some ops are not "
                "supported by the native TFLite runtime\" (TF Select would be needed), bfloat16 "
                "with \"Unsupported TensorFlow type <dtype: 'bfloat16'> provided for the input "
                "type\"")


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
    if case.cell_kind.has_cell_state:
        specs += [tf.TensorSpec((B, H), dtype, name=f"c0_{s}") for s in range(n)]
    if case.seq_lengths is not None:
        specs.append(tf.TensorSpec((B, T), tf.bool, name="mask"))
    return specs


def convert(K: Any, tf: Any, case: Case, native: dict[str, np.ndarray], *, activation: str,
            layer_kwargs: dict[str, Any] | None = None) -> bytes:
    """The ``.tflite`` flatbuffer of the case's stack (weights ``native`` as constants)."""
    from harness.dtypes import FORMATS

    lstm = case.cell_kind.has_cell_state
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
    module.layers = layers  # keeps the variables alive until they are frozen
    module.stack = tf.function(stack, input_signature=signature(case, tf))
    concrete = module.stack.get_concrete_function()
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], module)
    converter.experimental_lower_to_saved_model = False  # frozen in memory (ROUTE)
    with quiet_converter(tf):
        return converter.convert()


@contextlib.contextmanager
def quiet_converter(tf: Any) -> Iterator[None]:
    """The converter logs its passes through Python logging at INFO and WARNING, and its MLIR
    diagnostics (one location line per op of a graph it refuses) from C++ to file descriptor 2,
    as the interpreter does its delegate's creation: none is for the user's terminal. A refusal
    still raises ``ConverterError``, whose message names the ops (the pair's error row or
    not-applicable reason quotes it)."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        with native_stderr_to_scratch(), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def output_names(case: Case) -> list[str]:
    """The converted function's outputs in order: every layer's y, then h_n, then c_n per
    layer and direction."""
    n = case.num_layers * case.num_directions
    return ([f"y_{k}" for k in range(case.num_layers)] + [f"h_n_{s}" for s in range(n)]
            + ([f"c_n_{s}" for s in range(n)] if case.cell_kind.has_cell_state else []))


def output_roles(case: Case, interpreter: Any) -> dict[str, str]:
    """The interpreter's output tensor names -> what each is (:mod:`harness.families.readout`'s
    roles, :func:`output_names`). A frozen function's k-th output is the tensor named
    ``Identity_k`` (``Identity`` for the first); the interpreter lists them in its own order."""
    names = output_names(case)
    roles = {}
    for d in interpreter.get_output_details():
        k = 0 if d["name"] == "Identity" else int(d["name"].removeprefix("Identity_"))
        roles[d["name"]] = names[k] if 0 <= k < len(names) else d["name"]
    if sorted(roles.values()) != sorted(names):
        raise AdapterFault(f"the converted model's outputs are {sorted(roles.values())}, "
                           f"expected {names}")
    return roles


def tflite_handed(model: bytes, feeds: dict[str, np.ndarray], roles: dict[str, str], *,
                  runner: str, framework: str = "litert", op_resolver: str | None = None,
                  h_n: str = "output", absent: dict[str, str] | None = None,
                  scheme: str | None = None) -> Handed:
    """What a LiteRT adapter hands the interpreter, for a reproducer: the model's bytes
    (``model.tflite``), the inputs as fed (``feed/<name>``, in the order fed) and how it ran
    them: ``runner`` ``"signature"`` (the model's one signature runner, fed by keyword) or
    ``"tensors"`` (``set_tensor`` per input detail name, ``invoke``, ``get_tensor`` per output
    detail), the ``op_resolver`` (an ``OpResolverType`` name; None: the interpreter's default),
    the outputs' ``roles`` (:mod:`harness.families.readout`), ``h_n`` ``"from_y"`` where it is
    read from ``y`` (:func:`harness.families.readout.h_n_from_y`), the outputs not compared
    (``absent``, with why) and a quantized model's ``scheme``."""
    return Handed("tflite", {
        "framework": framework, "runner": runner, "inputs": list(feeds), "roles": dict(roles),
        "op_resolver": op_resolver, "h_n": h_n, "absent": dict(absent or {}), "scheme": scheme},
        arrays={f"feed/{name}": np.asarray(a) for name, a in feeds.items()},
        files={"model.tflite": bytes(model)})


def feeds(case: Case, inputs: Inputs) -> dict[str, np.ndarray]:
    """The signature runner's inputs, named as in :func:`signature`, in the case dtype."""
    from harness.dtypes import FORMATS

    np_dtype = FORMATS[case.dtype].numpy
    out = {"x": np.ascontiguousarray(inputs.x, dtype=np_dtype)}
    out |= {f"h0_{s}": np.ascontiguousarray(h, dtype=np_dtype) for s, h in enumerate(inputs.h0)}
    if case.cell_kind.has_cell_state:
        out |= {f"c0_{s}": np.ascontiguousarray(c, dtype=np_dtype)
                for s, c in enumerate(inputs.c0)}
    if case.seq_lengths is not None:
        out["mask"] = valid_mask(inputs)
    return out


def run_litert(K: Any, tf: Any, case: Case, native: dict[str, np.ndarray], inputs: Inputs, *,
               activation: str, layer_kwargs: dict[str, Any] | None = None) -> Outputs:
    """Convert (:func:`convert`) and run the case in the LiteRT interpreter; the form the
    converter emitted is in ``Outputs.note``, the converted model in ``Outputs.models``
    (``--save-outputs`` writes it as outputs/<case>/<adapter>.tflite) and, with the inputs as
    fed and its outputs' roles, in ``Outputs.handed`` (a reproducer runs it again)."""
    Interpreter = import_litert()
    model = convert(K, tf, case, native, activation=activation, layer_kwargs=layer_kwargs)
    with quiet_converter(tf):  # the interpreter's "Created ... XNNPACK delegate" line
        ops = main_ops(Interpreter, model)
        interpreter = Interpreter(model_content=model)
        interpreter.allocate_tensors()
    fed = feeds(case, inputs)
    got = run_tensors(interpreter, fed)  # as a reproducer runs it
    roles = output_roles(case, interpreter)
    ys, h_n, c_n = readout(got, roles, case.num_layers)
    return Outputs(
        y=ys[case.num_layers - 1], h_n=h_n, c_n=c_n,
        y_layers=[ys[k] for k in range(case.num_layers)],
        note=f"LiteRT ran the {form_of(ops)} form (converted ops: "
             f"{', '.join(dict.fromkeys(ops))})",
        models={"tflite": model},
        handed=tflite_handed(model, fed, roles, runner="tensors"),
    )


class LiteRTAdapter(KerasLibraryAdapter):
    """A Keras library's stack converted and run in LiteRT. An adapter names the library
    (:class:`~harness.adapters._keras.KerasLibraryAdapter`) and declares its own name and
    capabilities."""

    framework = "litert"
    saved_models = ("tflite",)  # the converted model the interpreter ran
    unroll = False  # ``unroll=True``: the steps unrolled into the graph (tests)

    def check_available(self) -> None:
        super().check_available()
        import_litert()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "ai_edge_litert": litert_version(), "converter": ROUTE,
                "unroll": str(self.unroll)}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, K = self.import_keras()
        with tf.device("/CPU:0"):
            return run_litert(K, tf, case, native, inputs,
                              activation=self.activations[case.recurrent_activation],
                              layer_kwargs={**self.layer_kwargs, "unroll": self.unroll})
