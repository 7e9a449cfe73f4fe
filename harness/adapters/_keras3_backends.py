"""What the adapters of Keras 3 on a backend other than TensorFlow or JAX share (``keras3-torch``,
``keras3-openvino``): the backend's import in a worker process of its own, the case's stack run
eagerly in ``keras.ops``, and a spy on the backend's fused LSTM/GRU functions that says which
code path ran.

Keras 3 fixes its backend once per process, at import (``KERAS_BACKEND``), so these adapters
run in a worker started with it (:attr:`Adapter.own_process`, :mod:`harness.isolation`, with
scratch folders for ``KERAS_HOME``: a user's ``keras.json`` cannot choose the backend or
``floatx``). The stack is the one every Keras adapter builds
(:func:`harness.frameworks.keras.make_layers` and :func:`~harness.frameworks.keras.run_stack`).

Which path: a Keras LSTM/GRU layer first offers the whole sequence to the backend's
``lstm``/``gru`` (``bidirectional_lstm``/``bidirectional_gru`` for a ``Bidirectional``), which
either computes it (a backend-specific form: on torch a loop of torch ops with the input
projections precomputed, on OpenVINO an ``LSTMSequence``/``GRUSequence`` node) or raises
``NotImplementedError``, and then the layer runs Keras's generic ``backend.rnn`` step loop.
:class:`PathSpy` wraps those functions for the call and records what each did; the pair's
reason says it.

What a run hands Keras is ``Outputs.handed`` (family ``keras3-backend``,
:meth:`Keras3BackendAdapter.hand`): a reproducer sets the same environment before importing
Keras and builds the same stack with ``keras.ops`` only.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from harness.adapters._keras import layer_reasons
from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.frameworks.keras import (
    cell_class,
    cell_kwargs,
    direction_layers,
    make_layers,
    native_prefix,
    run_stack,
    set_native,
)
from harness.handed import Handed
from harness.spec import Case

# case recurrent_activation -> Keras 3 name; Keras 3 'hard_sigmoid' is relu6(x + 3) / 6
ACTIVATIONS = {"sigmoid": "sigmoid", "hard_sigmoid_keras3": "hard_sigmoid"}

# the backend functions a Keras LSTM/GRU layer offers the whole sequence to
FUSED = ("lstm", "gru", "bidirectional_lstm", "bidirectional_gru")

FLOAT64_REASON = ("Keras 3 off TensorFlow computes a float64 LSTM/GRU's tanh in float32 "
                  "(result_type demotes 64-bit types, keras-team/keras#23223)")


def import_keras_backend(backend: str, blocked: tuple[str, ...] = ()) -> Any:
    """Keras 3 on ``backend`` in a worker started for it, or Unavailable. ``blocked``: modules
    kept from being imported in the worker (e.g. a backend's telemetry)."""
    if os.environ.get("KERAS_BACKEND") != backend:  # only in the worker this adapter runs in
        raise Unavailable(f"Keras 3 on {backend} runs in a worker process of its own "
                          f"(KERAS_BACKEND={backend}); this process was not started for it")
    if "tensorflow" not in sys.modules:
        # Keras's serialize_keras_object (which Bidirectional calls to clone its layer)
        # imports TensorFlow whenever it is installed, only for an isinstance test: seconds
        # of import in a process that has no TF object. Blocked in this worker.
        sys.modules["tensorflow"] = None  # type: ignore[assignment]
    if "keras" not in sys.modules:
        for name in blocked:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    try:
        import keras
    except ImportError as exc:
        raise Unavailable(f"keras not installed ({exc}); pip install keras==3.15.1") from None
    if not keras.__version__.startswith("3."):
        raise Unavailable(f"keras {keras.__version__} is not Keras 3")
    found = keras.backend.backend()
    if found != backend:  # keras was imported before KERAS_BACKEND was set
        raise Unavailable(f"Keras 3 is loaded with the {found!r} backend in this process; "
                          f"this adapter needs {backend!r}")
    return keras


class PathSpy:
    """Records, per call of the backend's fused functions (:data:`FUSED`), whether the backend
    computed the sequence (``fused``) or declined it (``NotImplementedError``: the layer then
    runs Keras's generic ``rnn`` loop)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # (function, "fused" | "declined")

    @contextlib.contextmanager
    def watching(self, backend_module: Any) -> Iterator[PathSpy]:
        saved = {n: getattr(backend_module, n) for n in FUSED if hasattr(backend_module, n)}

        def spy(name: str, fn: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                try:
                    out = fn(*args, **kwargs)
                except NotImplementedError:
                    self.calls.append((name, "declined"))
                    raise
                self.calls.append((name, "fused"))
                return out
            return wrapped

        try:
            for name, fn in saved.items():
                setattr(backend_module, name, spy(name, fn))
            yield self
        finally:
            for name, fn in saved.items():
                setattr(backend_module, name, fn)

    def describe(self, fused_form: str) -> str:
        """What ran, for the pair's reason: ``fused_form`` names the backend's own form."""
        def which(kind: str, of: tuple[str, ...]) -> list[str]:
            return sorted({n for n, what in self.calls if what == kind and n in of})

        per_layer, both = FUSED[:2], FUSED[2:]
        parts = []
        if which("fused", both):
            parts.append(f"backend {'/'.join(which('fused', both))}: {fused_form}, both "
                         "directions in one call")
        if which("declined", both):
            parts.append(f"Bidirectional as two layers (backend "
                         f"{'/'.join(which('declined', both))} declined)")
        if which("fused", per_layer):
            parts.append(f"backend {'/'.join(which('fused', per_layer))}: {fused_form}")
        if which("declined", per_layer):
            parts.append(f"Keras's generic rnn step loop (backend "
                         f"{'/'.join(which('declined', per_layer))} declined)")
        return "; ".join(parts) or "no backend LSTM/GRU call seen"


def run_keras_ops(keras: Any, case: Case, native: dict[str, np.ndarray], inputs: Inputs, *,
                  activation: str, fused_form: str) -> Outputs:
    """Run ``case`` eagerly with Keras 3 on the loaded backend (forward only); float64 NumPy
    outputs, the path taken (:class:`PathSpy`) in ``Outputs.note``."""
    from keras import ops
    from keras.src import backend as backend_module

    from harness.dtypes import FORMATS

    np_dtype = FORMATS[case.dtype].numpy
    lstm = case.cell_kind.has_cell_state

    def tensor(a: np.ndarray) -> Any:
        return ops.convert_to_tensor(np.asarray(a).astype(np_dtype), dtype=case.dtype)

    mask = (ops.convert_to_tensor(np.arange(case.seq_len)[None, :] < inputs.lengths[:, None])
            if inputs.seq_lengths is not None else None)
    layers = make_layers(keras, case, activation=activation)
    for layer, rnn in enumerate(layers):
        for d, sub in direction_layers(case, rnn):
            set_native(sub, native, native_prefix(case, layer, d), np_dtype)
    x = tensor(inputs.x)
    h0 = [tensor(h) for h in inputs.h0]
    c0 = [tensor(c) for c in inputs.c0] if lstm else []
    spy = PathSpy()
    with spy.watching(backend_module):
        y, h_n, c_n, y_layers = run_stack(
            case, layers, x, h0, c0,
            call=lambda layer, rnn, layer_in, states: rnn(layer_in, initial_state=states,
                                                          mask=mask),
            flip=lambda y: ops.flip(y, axis=1),
            zero_padded=(None if mask is None else
                         lambda y: y * ops.cast(mask, y.dtype)[:, :, None]))

    def f64(t: Any) -> np.ndarray:
        return np.asarray(ops.convert_to_numpy(t)).astype(np.float64)

    return Outputs(y=f64(y), h_n=np.stack([f64(h) for h in h_n]),
                   c_n=np.stack([f64(c) for c in c_n]) if lstm else None,
                   y_layers=[f64(v) for v in y_layers], note=spy.describe(fused_form))


class Keras3BackendAdapter(Adapter):
    """Keras 3 ``LSTM``/``GRU``/``Bidirectional`` on ``backend`` in a worker of its own; an
    adapter sets its name, ``backend``, ``own_process`` environment, ``fused_form`` (what the
    backend's fused function computes); the capabilities are the same on every such backend."""

    layout_name = "keras"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        dtypes=frozenset({"float32", "float16", "bfloat16"}),
        recurrent_activations=frozenset(ACTIVATIONS),
        reasons=layer_reasons("Keras 3") | {"dtypes": FLOAT64_REASON},
    )
    backend = ""
    fused_form = ""
    blocked_modules: tuple[str, ...] = ()  # kept from being imported in the worker

    def import_keras(self) -> Any:
        return import_keras_backend(self.backend, self.blocked_modules)

    def check_available(self) -> None:
        self.import_keras()

    def hand(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Handed:
        """What :func:`run_keras_ops` hands Keras (family ``keras3-backend``): the worker's
        environment (``own_process``: the backend, set before Keras is imported) and the
        modules kept from being imported there, the layer class and its keyword arguments
        (:func:`~harness.frameworks.keras.make_layers`'s), the case dtype, whether a mask is
        passed; the cell variables by native name (``param/...``) and the inputs as fed
        (``feed/...``)."""
        arrays = {f"param/{k}": np.asarray(v) for k, v in native.items()}
        arrays |= {"feed/x": np.asarray(inputs.x), "feed/h0": np.asarray(inputs.h0)}
        if case.cell_kind.has_cell_state:
            arrays["feed/c0"] = np.asarray(inputs.c0)
        if inputs.seq_lengths is not None:
            arrays["feed/lengths"] = np.asarray(inputs.lengths)
        return Handed("keras3-backend", {
            "framework": "keras", "backend": self.backend, "environ": dict(self.own_process),
            "blocked": ["tensorflow", *self.blocked_modules], "cls": cell_class(case),
            "kwargs": cell_kwargs(case, activation=ACTIVATIONS[case.recurrent_activation]),
            "dtype": case.dtype, "lengths": inputs.seq_lengths is not None}, arrays=arrays)

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        keras = self.import_keras()
        out = run_keras_ops(keras, case, native, inputs,
                            activation=ACTIVATIONS[case.recurrent_activation],
                            fused_form=self.fused_form)
        out.handed = self.hand(case, native, inputs)
        return out
