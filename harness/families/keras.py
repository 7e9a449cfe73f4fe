"""The ``keras`` and ``keras3-backend`` families: how the Keras adapters
(harness/adapters/_keras.py, _keras3_backends.py, and the LiteRT ones that convert the same
stack) build the stack (:func:`keras_layers`), load the cell variables by name
(:func:`set_cell_weights`) and run it in any backend's ops (:func:`keras_stack`), pasted into
their reproducers (:func:`source`) so that a script runs Keras by the very code the adapter
ran. The pasted part takes Keras's modules and the backend's ops as arguments: this module
imports nothing of a framework. :data:`KERAS` and :data:`KERAS3_BACKEND` are the scripts'
framework parts around it: tf_keras or Keras 3 on TensorFlow, and Keras 3 on another backend
(torch, OpenVINO) with the worker's environment set before Keras is imported.
"""

from __future__ import annotations

from harness.families.paste import Family, below

MARKER = "# --- a Keras stack as the harness runs it (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    return below(__file__, MARKER)


# the script's stack: built from CALL, its variables from ``weights``, run with the backend's ops
STACK = '''

def run_keras(layers, x, h0, c0, mask, weights, dtype, np_dtype, flip, masked):
    """keras_layers, set_cell_weights and keras_stack (above) as the adapter ran them."""
    L, D, H = SPEC["num_layers"], len(SPEC["directions"]), SPEC["hidden_size"]
    built = keras_layers(layers, CALL["cls"], CALL["kwargs"], dtype, SPEC["dir_mode"],
                         SPEC["batch"], SPEC["seq_len"], [SPEC["input_size"]] + [D * H] * (L - 1))
    for k, rnn in enumerate(built):
        for d, sub in direction_layers(rnn, SPEC["dir_mode"], SPEC["directions"]):
            set_cell_weights(sub, weights, keras_prefix(L, D, k, d), np_dtype)
    return keras_stack(built, x, h0, c0, D, SPEC["has_cell_state"], SPEC["dir_mode"],
                       call=lambda k, rnn, layer_in, states: rnn(layer_in, initial_state=states,
                                                                 mask=mask),
                       flip=flip, zero_padded=None if mask is None else (lambda y: masked(y, mask)))
'''

KERAS = '''{backend}import importlib  # noqa: E402

import tensorflow as tf  # noqa: E402

K = importlib.import_module(CALL["module"])  # tf_keras, or Keras 3


def framework_versions():
    return {{"tensorflow": tf.__version__, CALL["module"]: K.__version__}}


def device():
    return CALL["device"] + " (" + ", ".join(d.name for d in tf.config.list_physical_devices()) \\
        + " visible)"


def run_framework():
    """The stack (run_keras, below) in TensorFlow tensors on CALL's device."""
    lstm, dtype = SPEC["has_cell_state"], CALL["dtype"]
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype

    def tensor(a):
        return tf.constant(np.asarray(a).astype(np_dtype), dtype=dtype)

    def f64(t):
        return np.asarray(t.numpy()).astype(np.float64)

    with tf.device(CALL["device"]):
        mask = None
        if CALL["lengths"]:
            mask = tf.constant(np.arange(SPEC["seq_len"])[None, :] < LENGTHS[:, None])
        c0 = [tensor(c) for c in C0] if lstm else []
        y, h_n, c_n, ys = run_keras(K.layers, tensor(X), [tensor(h) for h in H0], c0, mask,
                                    HANDED, dtype, np_dtype, flip=lambda y: tf.reverse(y, axis=[1]),
                                    masked=lambda y, m: y * tf.cast(m, y.dtype)[:, :, None])
        return ({{k: f64(v) for k, v in enumerate(ys)}}, np.stack([f64(h) for h in h_n]),
                np.stack([f64(c) for c in c_n]) if lstm else None)
'''

KERAS3_BACKEND = '''import importlib.metadata  # noqa: E402

# As the harness ran it: Keras 3 reads its backend once, at import, so the worker's environment
# (KERAS_BACKEND; KERAS_TORCH_DEVICE=cpu on torch) is set first, and the modules the harness
# kept out of that worker stay out (TensorFlow, which Keras imports only for an isinstance
# test when it clones a Bidirectional's layer; OpenVINO's telemetry)
os.environ.update(CALL["environ"])
for _name in CALL["blocked"]:
    sys.modules.setdefault(_name, None)
import keras  # noqa: E402
from keras import ops  # noqa: E402

PARAMS = {k[len("param/"):]: v for k, v in HANDED.items() if k.startswith("param/")}


def framework_versions():
    return {"keras": keras.__version__, "keras_backend": keras.backend.backend(),
            CALL["backend"]: importlib.metadata.version(CALL["backend"])}


def device():
    return f"CPU, Keras 3 on the {keras.backend.backend()} backend (eager)"


def np_type(dtype):
    if dtype == "bfloat16":  # NumPy has no bfloat16; Keras depends on ml_dtypes, which has
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


def run_framework():
    """The stack (run_keras, below) in keras.ops tensors of CALL's backend."""
    if keras.backend.backend() != CALL["backend"]:
        sys.exit(f"Keras 3 loaded the {keras.backend.backend()!r} backend, not "
                 f"{CALL['backend']!r}: run this script in a fresh Python process")
    lstm, dtype = SPEC["has_cell_state"], CALL["dtype"]
    np_dtype = np_type(dtype)

    def tensor(a):
        return ops.convert_to_tensor(np.asarray(a).astype(np_dtype), dtype=dtype)

    def f64(t):
        return np.asarray(ops.convert_to_numpy(t)).astype(np.float64)

    mask = None
    if CALL["lengths"]:
        mask = ops.convert_to_tensor(np.arange(SPEC["seq_len"])[None, :]
                                     < HANDED["feed/lengths"][:, None])
    c0 = [tensor(c) for c in HANDED["feed/c0"]] if lstm else []
    y, h_n, c_n, ys = run_keras(keras.layers, tensor(HANDED["feed/x"]),
                                [tensor(h) for h in HANDED["feed/h0"]], c0, mask, PARAMS, dtype,
                                np_dtype, flip=lambda y: ops.flip(y, axis=1),
                                masked=lambda y, m: y * ops.cast(m, y.dtype)[:, :, None])
    return ({k: f64(v) for k, v in enumerate(ys)}, np.stack([f64(h) for h in h_n]),
            np.stack([f64(c) for c in c_n]) if lstm else None)
'''

_TF_BACKEND = 'os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # as the harness ran it\n'
MODULES = {"keras": ("TensorFlow and Keras 3 (pip install tensorflow keras)", _TF_BACKEND),
           "tf_keras": ("TensorFlow and tf_keras (pip install tensorflow tf_keras)", "")}
BACKEND_NEEDS = {"torch": "Keras 3 and PyTorch (pip install keras torch)",
                 "openvino": "Keras 3 and OpenVINO (pip install keras openvino)"}
_KERAS_TRACKER = "https://github.com/keras-team/keras/issues"

FAMILY = Family(
    "keras", framework=lambda call: KERAS.format(backend=MODULES[call["module"]][1]) + STACK,
    needs=lambda call: MODULES[call["module"]][0], pasted=(source,),
    choices={"module": tuple(MODULES)},
    trackers={"keras": _KERAS_TRACKER,
              "tf_keras": "https://github.com/keras-team/tf-keras/issues"})

BACKEND_FAMILY = Family(
    "keras3-backend", framework=lambda call: KERAS3_BACKEND + STACK,
    needs=lambda call: BACKEND_NEEDS.get(call["backend"], f"Keras 3 and {call['backend']}"),
    pasted=(source,), trackers={"keras": _KERAS_TRACKER})


# --- a Keras stack as the harness runs it (pasted into repro.py) ---
KERAS_DIRECTION_NAMES = ("forward", "backward")  # the layout's direction names


def keras_short_name(variable):
    """The bare cell variable name (tf_keras names a variable ``lstm/lstm_cell/kernel:0``,
    Keras 3 ``kernel``)."""
    return variable.name.split("/")[-1].split(":")[0]


def keras_prefix(num_layers, num_directions, layer, direction):
    """Layout ``keras`` scoping: bare names for one unidirectional layer, else
    ``layer{k}/{forward|backward}/``."""
    if num_layers == 1 and num_directions == 1:
        return ""
    return f"layer{layer}/{KERAS_DIRECTION_NAMES[direction]}/"


def keras_layers(layers, cls_name, kwargs, dtype, dir_mode, batch, seq_len, input_sizes):
    """One built Keras layer per stack layer (``input_sizes``: each one's input width), in
    ``dtype``: ``Bidirectional(cls(**kwargs))`` for two directions, else ``cls(**kwargs)``
    (``go_backwards=True`` for the reverse direction); ``layers``: the library's
    ``layers`` module (tf_keras's, or Keras 3's on any backend)."""
    cls = getattr(layers, cls_name)
    built = []
    for width in input_sizes:
        if dir_mode == "bidirectional":
            # The wrapper gets the dtype too: a float32 wrapper would autocast float64 inputs.
            rnn = layers.Bidirectional(cls(**kwargs), dtype=dtype)
        else:
            rnn = cls(go_backwards=dir_mode == "reverse", **kwargs)
        rnn.build((batch, seq_len, width))
        built.append(rnn)
    return built


def direction_layers(rnn, dir_mode, directions):
    """(direction, LSTM/GRU layer) pairs of one layer of :func:`keras_layers`."""
    if dir_mode == "bidirectional":
        return [(0, rnn.forward_layer), (1, rnn.backward_layer)]
    return [(directions[0], rnn)]


def set_cell_weights(rnn, weights, prefix, np_dtype):
    """Set a built LSTM/GRU layer's variables from ``weights`` (``prefix`` + bare name), in the
    order ``get_weights`` lists them; returns the bare names in that order."""
    names = [keras_short_name(v) for v in rnn.weights]
    rnn.set_weights([weights[prefix + n].astype(np_dtype) for n in names])
    return names


def keras_stack(layers, x, h0, c0, num_directions, lstm, dir_mode, *, call, flip, zero_padded):
    """The stack of :func:`keras_layers` on ``x`` [B, T, I], in the ops of whatever backend the
    three functions use: ``call(layer, rnn, layer_in, states)`` -> Keras's ``[y, *finals]``,
    ``flip(y)`` reverses time (a ``go_backwards`` layer returns y in reading order),
    ``zero_padded(y)`` zeroes padded steps (None: no mask; Keras CPU carries the last valid
    output into them, Bidirectional already writes zeros). ``h0``, ``c0``: one [B, H] tensor
    per layer and direction (``c0`` empty for GRU). Returns (y, h_n, c_n, every layer's y),
    ``h_n``/``c_n`` one tensor per layer and direction."""
    D = num_directions
    n_state = 2 if lstm else 1
    layer_in = x
    h_n, c_n, y_layers = [], [], []
    for layer, rnn in enumerate(layers):
        states = []  # Keras order: [h, c] per direction, forward first
        for k in range(D):
            s = layer * D + k
            states += [h0[s]] + ([c0[s]] if lstm else [])
        y, *finals = call(layer, rnn, layer_in, states)
        if dir_mode == "reverse":
            y = flip(y)
        if zero_padded is not None and D == 1:
            y = zero_padded(y)
        for k in range(D):
            h_n.append(finals[k * n_state])
            if lstm:
                c_n.append(finals[k * n_state + 1])
        y_layers.append(y)
        layer_in = y
    return layer_in, h_n, c_n, y_layers
