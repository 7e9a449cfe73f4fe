"""Keras 3 ``LSTM`` / ``GRU`` / ``Bidirectional`` on the JAX backend, CPU (layout ``keras``).

Keras 3 fixes its backend once per process, at import (``KERAS_BACKEND``, else the
``keras.json`` under ``KERAS_HOME``), and the harness's own process has Keras on TensorFlow
(``keras3``). So this adapter always runs in a worker process of its own
(:attr:`Adapter.own_process`, :mod:`harness.isolation`), started with ``KERAS_BACKEND=jax``,
JAX on the CPU with 64-bit types enabled (``JAX_ENABLE_X64``: without it JAX silently makes
float64 float32), and scratch folders for ``KERAS_HOME`` and JAX's compilation cache, so a
user's ``~/.keras/keras.json`` can neither choose the backend nor set ``floatx``.

The layers are the ones the TensorFlow adapters build (:func:`harness.frameworks.keras.make_layers`,
the same stack in :func:`harness.frameworks.keras.run_stack`), called with
``stateless_call`` on JAX arrays, so the whole forward pass is a pure function of ``x``, the
initial states and the cell variables: a gradient case is its ``jax.vjp``, pulled back with
``dy``, ``dh_n``, ``dc_n`` through the very outputs the adapter returns (flips and the zeroing
of padded steps included). On the CPU, keras#22399's cuDNN LSTM path is never taken (it needs
a GPU); keras#22401's ``lax.scan`` GRU is, for a reset-after GRU without a mask (a masked or
reset-before GRU takes the generic ``rnn`` loop): tests/adapters/test_adapter_keras3_jax.py.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from harness.adapters._keras import layer_reasons
from harness.adapters._xla import check_xla_flags
from harness.adapters.base import Adapter, Capabilities
from harness.data import Gradients, Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.keras import (
    direction_layers,
    make_layers,
    native_prefix,
    run_stack,
    set_native,
    short_name,
)
from harness.spec import Case

# case recurrent_activation -> Keras 3 name; Keras 3 'hard_sigmoid' is relu6(x + 3) / 6
ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_keras3": "hard_sigmoid"}

# The worker's environment (the scratch folders are added by harness.isolation).
ENVIRONMENT = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"}


def import_keras_jax() -> tuple[Any, Any]:
    """(jax, keras) with Keras 3 on the JAX backend and JAX's 64-bit types, or Unavailable."""
    if os.environ.get("KERAS_BACKEND") != "jax":  # only in the worker this adapter runs in
        raise Unavailable("Keras 3 on JAX runs in a worker process of its own (KERAS_BACKEND="
                          "jax); this process was not started for it")
    if "tensorflow" not in sys.modules:
        # Keras's serialize_keras_object (which Bidirectional calls to clone its layer)
        # imports TensorFlow whenever it is installed, only to test isinstance(obj,
        # tf.TensorShape) (keras/src/saving/serialization_lib.py): seconds of import and
        # TF's start-up lines in a process that has no TF object. Blocked in this process.
        sys.modules["tensorflow"] = None  # type: ignore[assignment]
    try:
        import jax
        import keras
    except ImportError as exc:
        raise Unavailable(f"keras/jax not installed ({exc}); pip install keras==3.15.1 "
                          "jax==0.10.2") from None
    if not keras.__version__.startswith("3."):
        raise Unavailable(f"keras {keras.__version__} is not Keras 3")
    backend = keras.backend.backend()
    if backend != "jax":  # keras was imported before KERAS_BACKEND was set
        raise Unavailable(f"Keras 3 is loaded with the {backend!r} backend in this process; "
                          "this adapter needs 'jax'")
    if not jax.config.jax_enable_x64:
        raise Unavailable("JAX's 64-bit types are off in this process (JAX_ENABLE_X64)")
    return jax, keras


class Keras3Jax(Adapter):
    name = "keras3-jax"
    title = "Keras 3 LSTM/GRU, JAX backend (CPU)"
    framework = "jax"
    requires = ("jax", "keras")
    layout_name = "keras"
    native_in_case_dtype = True
    own_process = ENVIRONMENT
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        # keras.ops.tanh (the cell activation) computes a float64 tensor in float32 on every
        # backend but TensorFlow: dtypes.result_type demotes 64-bit types to 32-bit
        # (keras/src/backend/common/dtypes.py, BIT64_TO_BIT32_DTYPE; keras-team/keras#23223),
        # so a float64 layer is float32 arithmetic (~3e-8 off);
        # tests/adapters/test_adapter_keras3_jax.py runs it anyway and checks that it still diverges
        dtypes=frozenset({"float32", "float16", "bfloat16"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        gradients=True,
        reasons=layer_reasons("Keras 3") | {
            "dtypes": "Keras 3 on JAX computes a float64 LSTM/GRU's tanh in float32 "
                      "(result_type demotes 64-bit types off TensorFlow, keras-team/keras#23223)",
        },
    )

    def check_available(self) -> None:
        import_keras_jax()

    def versions(self) -> dict[str, str]:
        check_xla_flags()  # default_backend() starts XLA, which an unknown flag would end
        jax, keras = import_keras_jax()
        import jaxlib

        return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "keras": keras.__version__,
                "keras_backend": keras.backend.backend(),
                "jax_platform": jax.default_backend()}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        check_xla_flags()
        jax, keras = import_keras_jax()
        return run_keras_jax(jax, keras, case, native, inputs,
                             activation=ACTIVATIONS[case.recurrent_activation],
                             gradients=self.computes_gradients(case))


def run_keras_jax(jax: Any, keras: Any, case: Case, native: dict[str, np.ndarray],
                  inputs: Inputs, *, activation: str, gradients: bool) -> Outputs:
    """Run ``case`` (and for ``gradients`` its backward pass, ``jax.vjp`` of the same pure
    function) with Keras 3 on JAX; float64 NumPy outputs, ``grads.params`` by native name."""
    import jax.numpy as jnp

    from harness.dtypes import FORMATS

    dtype = case.dtype
    np_dtype = FORMATS[dtype].numpy
    lstm = case.cell_kind.has_cell_state

    def array(a: np.ndarray) -> Any:
        return jnp.asarray(np.asarray(a).astype(np_dtype), dtype=dtype)

    T = inputs.x.shape[1]
    mask = (jnp.asarray(np.arange(T)[None, :] < inputs.lengths[:, None])
            if inputs.seq_lengths is not None else None)
    layers = make_layers(keras, case, activation=activation)
    names: list[list[str]] = []  # per layer: native name of each of its trainable variables
    params: dict[str, Any] = {}
    for layer, rnn in enumerate(layers):
        of_variable = {}
        for d, sub in direction_layers(case, rnn):
            prefix = native_prefix(case, layer, d)
            set_native(sub, native, prefix, np_dtype)
            of_variable |= {id(v): prefix + short_name(v) for v in sub.weights}
        names.append([of_variable[id(v)] for v in rnn.trainable_variables])
        params |= {n: v.value for n, v in zip(names[-1], rnn.trainable_variables, strict=True)}
    fixed = [[v.value for v in rnn.non_trainable_variables] for rnn in layers]

    def forward(x, h0, c0, params):
        def call(layer, rnn, layer_in, states):
            out, _ = rnn.stateless_call([params[n] for n in names[layer]], fixed[layer],
                                        layer_in, initial_state=states, mask=mask)
            return out

        zero_padded = None if mask is None else (lambda y: y * mask[:, :, None].astype(y.dtype))
        y, h_n, c_n, y_layers = run_stack(case, layers, x, list(h0), list(c0), call=call,
                                          flip=lambda y: jnp.flip(y, axis=1),
                                          zero_padded=zero_padded)
        return tuple(y_layers), tuple(h_n), tuple(c_n)

    x = array(inputs.x)
    h0 = tuple(array(h) for h in inputs.h0)
    c0 = tuple(array(c) for c in inputs.c0) if lstm else ()
    if not gradients:
        y_layers, h_n, c_n = jax.jit(forward)(x, h0, c0, params)
        grads = None
    else:
        def forward_backward(x, h0, c0, params, dy, dh, dc):
            outs, pull = jax.vjp(forward, x, h0, c0, params)
            ups = tuple(jnp.zeros_like(v) for v in outs[0][:-1]) + (dy,)
            return outs, pull((ups, dh, dc))

        dh = tuple(array(g) for g in inputs.dh_n)
        dc = tuple(array(g) for g in inputs.dc_n) if lstm else ()
        (y_layers, h_n, c_n), (dx, dh0, dc0, dparams) = jax.jit(forward_backward)(
            x, h0, c0, params, array(inputs.dy), dh, dc)
        grads = Gradients(dx=f64(dx), dh0=np.stack([f64(g) for g in dh0]),
                          dc0=np.stack([f64(g) for g in dc0]) if lstm else None,
                          params={n: f64(g) for n, g in dparams.items()})
    return Outputs(y=f64(y_layers[-1]), h_n=np.stack([f64(h) for h in h_n]),
                   c_n=np.stack([f64(c) for c in c_n]) if lstm else None,
                   y_layers=[f64(v) for v in y_layers], grads=grads)


def f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)
