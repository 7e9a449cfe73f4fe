"""The executor shared by the tf_keras (``keras``) and Keras 3 (``keras3``) adapters, and the
Keras stack every Keras path builds (:func:`make_layers`).

Both libraries have the same ``LSTM`` / ``GRU`` / ``Bidirectional`` API and the same cell
variables (layout ``keras``, docs/layouts.md, keras), so one executor and one adapter class
(:class:`KerasAdapter`) serve both; the adapters differ only in data: the module they import,
what ``'hard_sigmoid'`` means, and how the CPU path is forced.

Per layer the executor builds one Keras layer, called eagerly on tensors:

- forward: ``LSTM/GRU(return_sequences=True, return_state=True)`` -> ``[y, h(, c)]``;
- reverse: the same with ``go_backwards=True``; Keras returns ``y`` in reading order (last
  step first), so it is flipped back into input time order. With a right-padded mask, the
  flipped sequence starts with the masked steps, which keep the state, so the reverse direction
  starts at each sequence's last valid step, as the harness convention wants;
- bidirectional: ``Bidirectional(LSTM/GRU(...))`` -> ``[y, h_f(, c_f), h_b(, c_b)]``, ``y`` with
  forward features first and the backward half already in input time order.

Variable lengths are a boolean ``mask`` [B, T] (right padded). A unidirectional Keras CPU layer
repeats the last valid output at padded steps (``zero_output_for_mask=False``, docs/layouts.md,
keras; Variable lengths and padding); the executor zeroes them, as the layout's runtime notes say.
``Bidirectional`` forces
``zero_output_for_mask=True`` and needs no help. States are the ones at the last valid step.

Gradient cases (:func:`backward`) record that forward under a ``tf.GradientTape`` watching
``x``, every initial state and every cell variable, and pull the upstream gradients back
through the very tensors the adapter returns (after the flips and the zeroing of padded steps,
all TF ops), so each conversion is differentiated too; ``output_gradients`` gives the tape
``dy``, ``dh_n``, ``dc_n`` directly (the vector-Jacobian product of
L = Σ dy ⊙ y + Σ dh_n ⊙ h_n + Σ dc_n ⊙ c_n, without summing a loss in the case dtype).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np

from harness.adapters._tf import import_tf
from harness.adapters.base import Adapter
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.families import keras as keras_family
from harness.layouts.keras import CELL_VARIABLES
from harness.repro.handed import Handed
from harness.spec import Case

# case recurrent_activation -> tf_keras name; tf_keras 'hard_sigmoid' is clip(0.2x + 0.5)
TF_KERAS_ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_tf_keras": "hard_sigmoid"}


def import_tf_keras():
    """(tensorflow, tf_keras), or Unavailable."""
    try:
        tf = import_tf()  # first, without its C++ start-up lines
        import tf_keras
    except ImportError as exc:
        raise Unavailable(
            f"tf_keras is not installed ({exc}); pip install tensorflow==2.21.0 tf_keras==2.21.0"
        ) from None
    return tf, tf_keras


# case recurrent_activation -> Keras 3 name; Keras 3 'hard_sigmoid' is relu6(x + 3) / 6
KERAS3_ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_keras3": "hard_sigmoid"}


def import_keras3():
    """(tensorflow, keras) with Keras 3 on the TensorFlow backend, or Unavailable."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    try:
        tf = import_tf()  # first, without its C++ start-up lines
        import keras
    except ImportError as exc:
        raise Unavailable(
            f"keras/tensorflow not installed ({exc}); pip install keras==3.15.1 tensorflow==2.21.0"
        ) from None
    if not keras.__version__.startswith("3."):
        raise Unavailable(f"keras {keras.__version__} is not Keras 3")
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise Unavailable(f"Keras 3 is loaded with the {backend!r} backend in this process "
                          "(KERAS_BACKEND); this adapter needs 'tensorflow'")
    return tf, keras


def layer_reasons(library: str) -> dict[str, str]:
    """Why ``library``'s LSTM / GRU (``tf_keras`` or ``Keras 3``, the same layer API on every
    backend and after conversion) cannot run a case needing a feature: Capabilities.reasons."""
    other = {"tf_keras": ("'hard_sigmoid' is 0.2x + 0.5 (hard_sigmoid_tf_keras)",
                          "x/6 + 0.5 (hard_sigmoid_keras3)"),
             "Keras 3": ("'hard_sigmoid' is x/6 + 0.5 (hard_sigmoid_keras3)",
                         "0.2x + 0.5 (hard_sigmoid_tf_keras)")}[library]
    return {
        "peepholes": f"{library} LSTM has no peephole connections",
        "projection": f"{library} LSTM has no projection",
        "cell_clip": f"{library} LSTM has no cell clipping",
        "proj_clip": f"{library} LSTM has no projection (nor its clipping)",
        "gate_clip": f"{library} LSTM/GRU have no gate pre-activation clipping",
        "input_forget": f"{library} LSTM has no coupled input-forget gate",
        "recurrent_activations": f"{library} {other[0]}; it has no {other[1]}",
    }


def short_name(variable: Any) -> str:
    """The bare cell variable name, one of the layout's :data:`CELL_VARIABLES` (tf_keras names a
    variable ``lstm/lstm_cell/kernel:0``, Keras 3 ``kernel``)."""
    return keras_family.keras_short_name(variable)


def native_prefix(case: Case, layer: int, d: int) -> str:
    """Layout ``keras`` scoping: bare names for one unidirectional layer, else layer{k}/{dir}/."""
    return keras_family.keras_prefix(case.num_layers, case.num_directions, layer, d)


def set_native(rnn: Any, native: dict[str, np.ndarray], prefix: str, np_dtype: Any) -> None:
    """Load ``native`` into a built LSTM/GRU layer, in the order ``get_weights`` lists them
    (:func:`harness.families.keras.set_cell_weights`, which a reproducer runs too)."""
    names = keras_family.set_cell_weights(rnn, native, prefix, np_dtype)
    assert sorted(names) == sorted(CELL_VARIABLES), names


def cell_class(case: Case) -> str:
    return {"lstm": "LSTM", "gru": "GRU"}[case.cell]


def cell_kwargs(case: Case, *, activation: str, layer_kwargs: dict[str, Any] | None = None,
                return_state: bool = True) -> dict[str, Any]:
    """The keyword arguments of every LSTM/GRU of :func:`make_layers` (JSON values)."""
    kwargs: dict[str, Any] = dict(
        units=case.hidden_size, return_sequences=True, return_state=return_state,
        recurrent_activation=activation, dtype=case.dtype,
        # every variable is overwritten; zeros also avoids the orthogonal initialiser's QR,
        # which has no bfloat16 kernel
        kernel_initializer="zeros", recurrent_initializer="zeros", bias_initializer="zeros",
        **(layer_kwargs or {}),
    )
    if case.cell_kind.reads("reset_after"):
        kwargs["reset_after"] = case.reset_after
    return kwargs


def make_layers(
    K: Any, case: Case, *, activation: str, layer_kwargs: dict[str, Any] | None = None,
    return_state: bool = True,
) -> list[Any]:
    """One built Keras layer per case layer, in the case dtype: ``Bidirectional(LSTM/GRU)`` for
    two directions, else ``LSTM/GRU`` (``go_backwards=True`` for the reverse direction).
    ``K`` is ``tf_keras`` or Keras 3's ``keras`` (on any backend); ``activation`` is its name of
    the case's recurrent activation; ``layer_kwargs`` go to every LSTM/GRU (e.g. Keras 3's
    ``use_cudnn=False``); ``return_state=False`` leaves out the final states (a Sequential's
    layers have one output each).

    The one place a case's Keras stack is built (:func:`harness.families.keras.keras_layers`,
    which a reproducer runs too): the Keras adapters run it (eagerly, traced for LiteRT,
    stateless on JAX), ``harness.convert`` saves it as Keras 3 weights."""
    kwargs = cell_kwargs(case, activation=activation, layer_kwargs=layer_kwargs,
                         return_state=return_state)
    return keras_family.keras_layers(
        K.layers, cell_class(case), kwargs, case.dtype, case.dir_mode, case.batch, case.seq_len,
        [case.layer_input_size(layer) for layer in range(case.num_layers)])


def direction_layers(case: Case, rnn: Any) -> list[tuple[int, Any]]:
    """(canonical direction, LSTM/GRU layer) pairs of one built layer from :func:`make_layers`."""
    return keras_family.direction_layers(rnn, case.dir_mode, case.directions)


def load_native(case: Case, layers: list[Any], native: dict[str, np.ndarray], np_dtype: Any
                ) -> dict[str, Any]:
    """Load ``native`` into every layer of :func:`make_layers`; native name -> Keras variable."""
    weights: dict[str, Any] = {}
    for layer, rnn in enumerate(layers):
        for d, sub in direction_layers(case, rnn):
            prefix = native_prefix(case, layer, d)
            set_native(sub, native, prefix, np_dtype)
            weights |= {prefix + short_name(v): v for v in sub.weights}
    return weights


def variable_shapes(case: Case, layers: list[Any]) -> dict[str, tuple[int, ...]]:
    """Native name (layout ``keras`` scoping) -> shape of every variable Keras created."""
    return {
        native_prefix(case, layer, d) + short_name(v): tuple(v.shape)
        for layer, rnn in enumerate(layers)
        for d, sub in direction_layers(case, rnn)
        for v in sub.weights
    }


def backward(
    tf: Any,
    tape: Any,
    case: Case,
    inputs: Inputs,
    outputs: tuple[Any, list[Any], list[Any]],
    sources: tuple[Any, list[Any], list[Any]],
    weights: dict[str, Any],
) -> Gradients:
    """The gradients of a gradient case from a ``tf.GradientTape`` that recorded the forward.

    ``outputs`` = (y [B, T, D*H], h_n, c_n) as returned (lists of [B, H] tensors per layer and
    direction, c_n empty for GRU), ``sources`` = (x [B, T, I], h0, c0) as fed (the same
    per-state lists), ``weights``: native tensor name -> Keras variable. The upstream gradients
    ``inputs.dy`` / ``dh_n`` / ``dc_n`` are cast to the case dtype (they are drawn rounded to
    it). Returns float64 NumPy gradients, ``params`` keyed by native name."""
    y, h_n, c_n = outputs
    x, h0, c0 = sources
    dtype = y.dtype

    def up(a: np.ndarray) -> Any:
        return tf.cast(tf.constant(np.asarray(a, dtype=np.float64)), dtype)

    targets = [y] + list(h_n) + list(c_n)
    upstream = [up(inputs.dy)] + [up(g) for g in inputs.dh_n]
    if c_n:
        upstream += [up(g) for g in inputs.dc_n]
    names = list(weights)
    grads = tape.gradient(targets, [x, *h0, *c0, *(weights[n] for n in names)],
                          output_gradients=upstream,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)

    def f64(t: Any) -> np.ndarray:
        return np.asarray(tf.convert_to_tensor(t).numpy()).astype(np.float64)

    dx, rest = grads[0], grads[1:]
    dh0, rest = rest[:len(h0)], rest[len(h0):]
    dc0, dw = rest[:len(c0)], rest[len(c0):]
    return Gradients(
        dx=f64(dx),
        dh0=np.stack([f64(g) for g in dh0]),
        dc0=np.stack([f64(g) for g in dc0]) if c0 else None,
        params={n: f64(g) for n, g in zip(names, dw, strict=True)},
    )


def valid_mask(inputs: Inputs) -> np.ndarray:
    """[B, T] bool: which steps of each sequence are valid (right padded)."""
    T = inputs.x.shape[1]
    return np.arange(T)[None, :] < inputs.lengths[:, None]


def run_keras(
    K: Any,
    tf: Any,
    case: Case,
    native: dict[str, np.ndarray],
    inputs: Inputs,
    *,
    activation: str,
    layer_kwargs: dict[str, Any] | None = None,
    gradients: bool = False,
) -> Outputs:
    """Run ``case`` with Keras module ``K`` (``tf_keras`` or ``keras``) in the current TF device
    scope; arguments as in :func:`make_layers`. ``gradients``: also the backward pass
    (:func:`backward`), in ``Outputs.grads``."""
    from harness.dtypes import FORMATS

    dtype = case.dtype
    np_dtype = FORMATS[dtype].numpy
    lstm = case.cell_kind.has_cell_state

    def tensor(a: np.ndarray) -> Any:
        return tf.constant(np.asarray(a).astype(np_dtype), dtype=dtype)

    mask = tf.constant(valid_mask(inputs)) if inputs.seq_lengths is not None else None
    layers = make_layers(K, case, activation=activation, layer_kwargs=layer_kwargs)
    weights = load_native(case, layers, native, np_dtype)
    x = tensor(inputs.x)
    h0 = [tensor(h) for h in inputs.h0]
    c0 = [tensor(c) for c in inputs.c0] if lstm else []
    tape = tf.GradientTape() if gradients else None
    with tape if tape is not None else contextlib.nullcontext():
        if tape is not None:
            tape.watch([x, *h0, *c0])  # the cell variables are watched as they are read
        y, h_n, c_n, y_layers = forward(tf, case, layers, x, h0, c0, mask)

    grads = None
    if tape is not None:
        grads = backward(tf, tape, case, inputs, (y, h_n, c_n), (x, h0, c0), weights)
    return outputs_of(y, h_n, c_n if lstm else None, y_layers, grads)


def forward(tf: Any, case: Case, layers: list[Any], x: Any, h0: list[Any], c0: list[Any],
            mask: Any) -> tuple[Any, list[Any], list[Any], list[Any]]:
    """:func:`run_stack` in TF ops, eagerly or traced (the LiteRT adapters convert a
    ``tf.function`` of it); ``mask`` [B, T] bool or None."""
    return run_stack(
        case, layers, x, h0, c0,
        call=lambda layer, rnn, layer_in, states: rnn(layer_in, initial_state=states, mask=mask),
        flip=lambda y: tf.reverse(y, axis=[1]),
        zero_padded=(None if mask is None else
                     lambda y: y * tf.cast(mask, y.dtype)[:, :, None]))


def run_stack(case: Case, layers: list[Any], x: Any, h0: list[Any], c0: list[Any], *,
              call: Any, flip: Any, zero_padded: Any) -> tuple[Any, list, list, list]:
    """The stack of :func:`make_layers` on ``x`` [B, T, I], in the ops of whatever backend the
    three functions use: ``call(layer, rnn, layer_in, states)`` -> Keras's ``[y, *finals]``,
    ``flip(y)`` reverses time, ``zero_padded(y)`` zeroes padded steps (None: no mask). ``h0``,
    ``c0``: one [B, H] tensor per layer and direction (``c0`` empty for GRU). Returns (y,
    h_n, c_n, every layer's y), ``h_n``/``c_n`` one tensor per layer and direction
    (:func:`harness.families.keras.keras_stack`, which a reproducer runs too)."""
    return keras_family.keras_stack(layers, x, h0, c0, case.num_directions,
                                    case.cell_kind.has_cell_state, case.dir_mode, call=call,
                                    flip=flip, zero_padded=zero_padded)


def outputs_of(y: Any, h_n: list, c_n: list | None, y_layers: list, grads: Gradients | None
               ) -> Outputs:
    """Outputs (float64 NumPy) from the TF tensors of a stack: ``h_n``/``c_n`` one tensor per
    layer and direction in the harness order (``c_n`` None for GRU)."""
    def f64(t: Any) -> np.ndarray:
        return np.asarray(t.numpy()).astype(np.float64)

    return Outputs(
        y=f64(y),
        h_n=np.stack([f64(h) for h in h_n]),
        c_n=np.stack([f64(c) for c in c_n]) if c_n is not None else None,
        y_layers=[f64(v) for v in y_layers],
        grads=grads,
    )


class KerasLibraryAdapter(Adapter):
    """An adapter of a Keras library's stack (tf_keras or Keras 3), the library as data:
    ``import_keras`` ((tensorflow, the Keras module), or Unavailable), its distribution
    ``keras_dist`` (for run.json), its ``activations`` (case name -> Keras name) and the
    ``layer_kwargs`` every LSTM/GRU gets. The Keras and LiteRT adapters build on it."""

    layout_name = "keras"
    native_in_case_dtype = True
    keras_dist = ""
    activations: dict[str, str] = {}
    layer_kwargs: dict[str, Any] = {}

    @staticmethod
    def import_keras() -> tuple[Any, Any]:
        raise NotImplementedError

    def check_available(self) -> None:
        self.import_keras()

    def versions(self) -> dict[str, str]:
        tf, K = self.import_keras()
        return {"tensorflow": tf.__version__, self.keras_dist: K.__version__}


class KerasAdapter(KerasLibraryAdapter):
    """A Keras library's ``LSTM`` / ``GRU`` / ``Bidirectional`` run eagerly on ``/CPU:0`` (so that a
    visible GPU does not switch it to its cuDNN path), gradients by ``tf.GradientTape``
    (:func:`backward`). An adapter names the library (:class:`KerasLibraryAdapter`) and declares
    its own name and capabilities."""

    framework = "keras"

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """The library, the layer class and its keyword arguments (the stack of
        :func:`make_layers`), the cell variables by native name, the call (a mask for
        lengths, on /CPU:0)."""
        return Handed("keras", {
            "framework": self.keras_dist, "module": self.keras_dist, "cls": cell_class(case),
            "kwargs": cell_kwargs(case, activation=self.activations[case.recurrent_activation],
                                  layer_kwargs=self.layer_kwargs),
            "dtype": case.dtype, "lengths": inputs.seq_lengths is not None,
            "device": "/CPU:0"}, arrays={k: np.asarray(v) for k, v in native.items()})

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        tf, K = self.import_keras()
        with tf.device("/CPU:0"):
            out = run_keras(K, tf, case, native, inputs,
                            activation=self.activations[case.recurrent_activation],
                            gradients=self.computes_gradients(case),
                            layer_kwargs=self.layer_kwargs)
        out.handed = self.hand(case, native, inputs)
        return out
