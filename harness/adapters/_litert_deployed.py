"""A case's tf_keras stack as a deployed model is made: a ``tf_keras.Model`` whose one output is
the last layer's ``y`` (no final states), converted by
``tf.lite.TFLiteConverter.from_keras_model`` and run in the LiteRT interpreter. This is the
route by which the converter emits its fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` kernel (measured
with TensorFlow 2.21, tf_keras 2.21, ai-edge-litert 2.3; docs/quantization.md, "Measured
facts"): one fused op per LSTM layer and direction, a reverse direction between two
``REVERSE_V2``, two directions joined by ``CONCATENATION``. A stack traced with its final states
as outputs (:mod:`harness.adapters._litert`) becomes a ``WHILE`` loop instead.

The model's inputs are ``x`` [B, T, I] and, where the case's initial states are not all zero,
one [B, H] ``h0_{s}`` and ``c0_{s}`` per layer and direction s (harness order). A deployed
model has no lengths: a Keras mask makes the converter emit a ``WHILE`` loop (measured), so
these adapters declare no variable lengths.

The model, the inputs as fed and how its one output is read are ``Outputs.handed`` (family
``tflite``, :func:`handed`): a reproducer runs the model again.

What the model does not output is :attr:`Outputs.absent`, with why (:func:`final_states`):
``c_n`` never; ``h_n`` of a one-layer stack is read from ``y`` (the forward direction's last
step, the reverse direction's first, as ``y`` holds the reverse direction in input time order),
of a deeper stack it is absent (``y`` is the last layer's only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from harness.adapters._keras import KerasLibraryAdapter, import_tf_keras
from harness.adapters._litert import quiet_converter, tflite_handed
from harness.adapters.base import AdapterFault
from harness.data import Inputs, Outputs
from harness.families.readout import h_n_from_y
from harness.frameworks.keras import TF_KERAS_ACTIVATIONS, load_native, make_layers
from harness.frameworks.litert import import_litert
from harness.frameworks.tf import native_stderr_to_scratch
from harness.handed import Handed
from harness.spec import Case

ROUTE = "TFLiteConverter.from_keras_model (a tf_keras Model whose only output is y)"
FUSED_LSTM = "UNIDIRECTIONAL_SEQUENCE_LSTM"

NOT_OUTPUT = "a deployed model outputs y only, not its final states"


class DeployedTfKeras(KerasLibraryAdapter):
    """What every adapter of a deployed tf_keras model shares: the framework it needs, the
    Keras it builds with, and the converted model ``--save-outputs`` writes."""

    framework = "litert"
    requires = ("tensorflow", "tf_keras", "ai_edge_litert")
    import_keras = staticmethod(import_tf_keras)
    keras_dist = "tf_keras"
    activations = TF_KERAS_ACTIVATIONS
    saved_models = ("tflite",)


def has_states(inputs: Inputs) -> bool:
    """Whether the model takes initial states: not where every one is zero (a model that starts
    from zeros, as a deployed one does, has none to feed)."""
    return bool(np.any(inputs.h0) or (inputs.c0 is not None and np.any(inputs.c0)))


def deployed_model(K: Any, tf: Any, case: Case, native: dict[str, np.ndarray], *,
                   activation: str, states: bool) -> Any:
    """The ``tf_keras.Model`` of the case's stack with the weights ``native`` (layout keras):
    inputs ``x`` (and ``h0_{s}``/``c0_{s}`` with ``states``), the last layer's ``y`` its one
    output, in the harness convention (a reverse layer's ``y`` flipped back to input time
    order)."""
    B, T = case.batch, case.seq_len
    D, H = case.num_directions, case.hidden_size
    n = case.num_layers * D
    lstm = case.cell_kind.has_cell_state
    layers = make_layers(K, case, activation=activation, return_state=False)
    load_native(case, layers, native, np.float32)
    x = K.Input((T, case.input_size), batch_size=B, name="x", dtype=case.dtype)
    inputs = [x]
    h0 = c0 = []
    if states:
        h0 = [K.Input((H,), batch_size=B, name=f"h0_{s}", dtype=case.dtype) for s in range(n)]
        c0 = ([K.Input((H,), batch_size=B, name=f"c0_{s}", dtype=case.dtype) for s in range(n)]
              if lstm else [])
        inputs += h0 + c0
    y = x
    for layer, rnn in enumerate(layers):
        init = None
        if states:  # Keras order: [h, c] per direction, forward first
            init = [t for k in range(D) for t in
                    ([h0[layer * D + k]] + ([c0[layer * D + k]] if lstm else []))]
        y = rnn(y, initial_state=init)
        if case.dir_mode == "reverse":  # go_backwards returns y in reading order
            y = tf.reverse(y, axis=[1])
    return K.Model(inputs, y)


def convert(model: Any, tf: Any, configure: Callable[[Any], None] | None = None) -> bytes:
    """The ``.tflite`` flatbuffer of ``model`` (``from_keras_model``); ``configure(converter)``
    sets the converter's options first (a quantization)."""
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if configure is not None:
        configure(converter)
    with quiet_converter(tf):
        return converter.convert()


def ops_of(Interpreter: Any, model: bytes) -> list[str]:
    """Op names of the main subgraph in execution order, before a delegate replaces any."""
    with native_stderr_to_scratch():  # the interpreter's "Created ... delegate" line
        interpreter = Interpreter(model_content=model)
    return [op["op_name"] for op in interpreter._get_ops_details()]


def ops_note(ops: list[str]) -> str:
    """The pair's words for the ops that ran."""
    return f"LiteRT ran the converted ops {', '.join(ops)}"


def require_fused(ops: list[str]) -> None:
    """AdapterFault naming the ops unless every op of the model is one a fused LSTM stack is
    made of: never a pass under the fused name for a loop (``WHILE``) or unrolled steps."""
    if FUSED_LSTM not in ops or "WHILE" in ops:
        raise AdapterFault(f"the converter did not emit the fused {FUSED_LSTM} kernel: "
                           f"converted ops {', '.join(ops)}")


def run_signature(Interpreter: Any, model: bytes, feeds: dict[str, np.ndarray], *,
                  op_resolver: Any = None) -> dict[str, np.ndarray]:
    """Run the model's one signature on ``feeds``; its outputs by name, which must be one (the
    deployed ``y``). ``op_resolver``: an ``ai_edge_litert`` ``OpResolverType`` (default: the
    interpreter's own, ``AUTO``)."""
    kwargs = {} if op_resolver is None else {"experimental_op_resolver_type": op_resolver}
    # its "Created ... XNNPACK delegate" line, which it writes where the delegate is applied
    # (at the first allocation, not at construction); errors still raise
    with native_stderr_to_scratch():
        interpreter = Interpreter(model_content=model, **kwargs)
        runner = interpreter.get_signature_runner()
        got = runner(**feeds)
    if len(got) != 1:
        raise AdapterFault(f"the converted model has outputs {sorted(got)}, expected y only")
    return {name: np.asarray(a) for name, a in got.items()}


def invoke(Interpreter: Any, model: bytes, feeds: dict[str, np.ndarray], *,
           op_resolver: Any = None) -> np.ndarray:
    """:func:`run_signature`'s one output, ``y`` (float64)."""
    got = run_signature(Interpreter, model, feeds, op_resolver=op_resolver)
    return np.asarray(next(iter(got.values())), dtype=np.float64)


def handed(case: Case, model: bytes, feeds: dict[str, np.ndarray], output: str,
           absent: dict[str, str], **kwargs: Any) -> Handed:
    """The reproducer's record of a deployed model run by :func:`run_signature`: its one
    output ``output`` is ``y``, ``h_n`` read from it where :func:`final_states` reads it;
    ``kwargs``: :func:`harness.adapters._litert.tflite_handed`'s (the op resolver, scheme)."""
    return tflite_handed(model, feeds, {output: "y"}, runner="signature",
                         h_n="output" if "h_n" in absent else "from_y", absent=absent,
                         **kwargs)


def feeds(case: Case, inputs: Inputs, states: bool) -> dict[str, np.ndarray]:
    """The signature's inputs as :func:`deployed_model` names them, float32."""
    out = {"x": np.ascontiguousarray(inputs.x, dtype=np.float32)}
    if states:
        out |= {f"h0_{s}": np.ascontiguousarray(h, dtype=np.float32)
                for s, h in enumerate(inputs.h0)}
        if inputs.c0 is not None:
            out |= {f"c0_{s}": np.ascontiguousarray(c, dtype=np.float32)
                    for s, c in enumerate(inputs.c0)}
    return out


def final_states(case: Case, y: np.ndarray) -> tuple[np.ndarray | None, dict[str, str]]:
    """(h_n read from ``y`` where ``y`` determines it, else None; the absent outputs with why).
    No lengths here (:data:`NOT_OUTPUT` models have none), so the forward direction's final h
    is ``y`` at the last step and the reverse direction's at the first
    (:func:`harness.families.readout.h_n_from_y`, which a reproducer runs too)."""
    others = {name: NOT_OUTPUT for name in case.cell_kind.final_states if name != "h_n"}
    if case.num_layers > 1 or case.seq_lengths is not None:
        why = f"{NOT_OUTPUT}, and y (the last layer's) does not determine the lower layers' one"
        return None, {"h_n": why} | others
    return h_n_from_y(y, case.directions, case.out_size), others


def run_deployed(case: Case, native: dict[str, np.ndarray], inputs: Inputs, *,
                 activation: str) -> tuple[Outputs, list[str]]:
    """Convert the case's deployed float model and run it: its outputs (``h_n`` from ``y``
    where it can be, the rest :attr:`Outputs.absent`) and the converted ops."""
    tf, K = import_tf_keras()
    Interpreter = import_litert()
    states = has_states(inputs)
    with tf.device("/CPU:0"):
        model = deployed_model(K, tf, case, native, activation=activation, states=states)
        flat = convert(model, tf)
    ops = ops_of(Interpreter, flat)
    fed = feeds(case, inputs, states)
    [(output, got)] = run_signature(Interpreter, flat, fed).items()
    y = np.asarray(got, dtype=np.float64)
    h_n, absent = final_states(case, y)
    return Outputs(y=y, h_n=h_n, absent=absent, models={"tflite": flat},
                   handed=handed(case, flat, fed, output, absent)), ops
