"""The case's Keras stack: one built ``LSTM`` / ``GRU`` (``Bidirectional`` for two directions)
per case layer, its variables loaded from layout ``keras`` tensors, and the stack run and
unpacked in the harness's order (:func:`run_stack`). tf_keras and Keras 3 (on any backend) have
the same layer API and cell variables (docs/layouts.md, keras), so the module of the library is
an argument. The Keras and LiteRT adapters run this stack (eagerly, traced for LiteRT, stateless
on JAX), ``harness.convert`` saves it as Keras 3 weights, and the API unpacks a user's own Keras
outputs with :func:`run_stack`."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.families import keras as keras_family
from harness.layouts.keras import CELL_VARIABLES
from harness.spec import Case

# case recurrent_activation -> tf_keras name; tf_keras 'hard_sigmoid' is clip(0.2x + 0.5)
TF_KERAS_ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_tf_keras": "hard_sigmoid"}
# case recurrent_activation -> Keras 3 name; Keras 3 'hard_sigmoid' is relu6(x + 3) / 6
KERAS3_ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_keras3": "hard_sigmoid"}


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
