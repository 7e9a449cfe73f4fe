"""The text of ``repro.py``: one renderer per framework family (:data:`RENDERERS`, keyed by
``Handed.family``), around parts every script shares (its header, its data, the float64
equations of harness/repro/equations.py, the comparison and the exit status).

A script imports NumPy and the adapter's framework only. It rebuilds what the adapter handed
its framework from the record (constructor arguments, the call, the weights in the
framework's own names and form, or the ONNX model beside it), computes the expected outputs
from the canonical float64 weights with the equations written into it, prints the error per
step and the first step beyond ``ATOL + RTOL * |expected|`` (the pair's tolerance; the harness
also passes a row within a multiple of its noise floor, which the script does not know), and
exits 1 when the divergence reproduces, 0 when it does not.

A converted model's script (families ``tflite``, ``executorch``) runs the model beside it and
reads its outputs with :mod:`harness.repro.readout`, pasted into it; an MLX script (family
``mlx``) runs the stack with :mod:`harness.repro.mlx_stack`, the adapter's own code, pasted
likewise (:data:`PASTED`); a Keras-on-torch or -OpenVINO script (family ``keras3-backend``)
sets the adapter's worker environment before it imports Keras. The script's header and main
part are its question's (:mod:`harness.repro.questions`, the key the pair's judge's figures
give: ``ReproRecord.question``), a quantized pair's the cost question.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.repro import equations, mlx_stack, questions, readout
from harness.repro.quote import py_literal
from harness.repro.record import ReproRecord

INLINE_MAX = 400  # numbers: at most this many in all, the data are written into the script


def data_arrays(record: ReproRecord) -> dict[str, np.ndarray]:
    """Every array the script loads, by the name it loads it: ``canonical/...`` (float64, for
    the equations), ``x``, ``h0``, ``c0``, ``lengths`` (float64 / int64, for the equations) and
    ``handed/...`` (as the framework got them)."""
    arrays = {f"canonical/{k}": v for k, v in record.canonical.items()}
    arrays |= dict(record.inputs)
    if record.handed is not None:
        arrays |= {f"handed/{k}": np.asarray(v) for k, v in record.handed.arrays.items()}
    return arrays


def inline(arrays: dict[str, np.ndarray]) -> bool:
    return sum(a.size for a in arrays.values()) <= INLINE_MAX


def _number(v: object) -> str:
    """A Python literal of one element; NaN and the infinities as NumPy's names."""
    if isinstance(v, float) and not np.isfinite(v):
        return "np.nan" if np.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
    return repr(v)


def _literal(a: np.ndarray) -> str:
    values = ", ".join(_number(v.item()) for v in a.reshape(-1))
    return (f"np.array([{values}], dtype={py_literal(a.dtype.name)})"
            f".reshape({tuple(int(n) for n in a.shape)!r})")


def _data_block(arrays: dict[str, np.ndarray]) -> str:
    if inline(arrays):
        body = "\n".join(f"    {py_literal(k)}: {_literal(v)}," for k, v in arrays.items())
        return f"DATA = {{\n{body}\n}}\n"
    return ('with np.load(os.path.join(HERE, "data.npz"), allow_pickle=False) as _npz:\n'
            "    DATA = {k: _npz[k] for k in _npz.files}\n")


INPUTS = '''
CANONICAL = {k[len("canonical/"):]: v for k, v in DATA.items() if k.startswith("canonical/")}
HANDED = {k[len("handed/"):]: v for k, v in DATA.items() if k.startswith("handed/")}
X, H0, LENGTHS = DATA["x"], DATA["h0"], DATA["lengths"]
C0 = DATA.get("c0")
ABSENT = {}  # outputs the framework's model does not have, with why: not compared
'''

SHARED = '''

def fitted(what, got, exp):
    """``got`` (float64) in ``exp``'s shape; where the framework returned fewer steps (or
    another shape) than the equations, the elements it lacks are NaN, which count as beyond."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape == exp.shape:
        return got
    print(f"{what}: the framework returned shape {list(got.shape)}, the equations "
          f"{list(exp.shape)}; what it lacks counts as beyond")
    out = np.full(exp.shape, np.nan)
    if got.ndim == exp.ndim:
        common = tuple(slice(0, min(a, b)) for a, b in zip(got.shape, exp.shape))
        out[common] = got[common]
    return out


def where(row):
    t = "" if row[3] is None else f" t={row[3]}"
    return f"{row[0]} layer {row[1]} direction {row[2]}{t}"


def header():
    print(f"Python {platform.python_version()}, NumPy {np.__version__}, "
          + ", ".join(f"{k} {v}" for k, v in framework_versions().items()))
    print(f"{platform.platform()}; CPU: {platform.processor() or platform.machine()}; "
          f"device: {device()}")
    for name, why in ABSENT.items():
        print(f"{name} not compared: {why}")
'''


# Flax -----------------------------------------------------------------------------------------

FLAX = '''
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # as the harness ran it
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import flax  # noqa: E402
{api_import}

CALL = {call}
DTYPE = jnp.dtype(CALL["dtype"])
NAMES = ("forward", "backward")


def framework_versions():
    import jaxlib

    return {{"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__}}


def device():
    return ", ".join(str(d) for d in jax.devices())


def params(k, d, cast):
    """The cell's parameter tree {{GATE: {{kind: array}}}} of layer k, direction d, as handed."""
    prefix = f"layer{{k}}/{{NAMES[d]}}/"
    tree = {{}}
    for name, value in HANDED.items():
        if name.startswith(prefix):
            gate, kind = name[len(prefix):].split("/")
            tree.setdefault(gate, {{}})[kind] = cast(value)
    return tree

{run_layer}

def carry(h, c):
    return (c, h) if SPEC["has_cell_state"] else h  # flax's LSTM carry is (c, h)


def forward(params_all, x, h0, c0, lengths):
    D, hs, cs = len(SPEC["directions"]), [], []
    for k in range(SPEC["num_layers"]):
        carries = [carry(h0[k * D + j], None if c0 is None else c0[k * D + j]) for j in range(D)]
        y, finals = run_layer(params_all[k], x, carries, lengths)
        if lengths is not None:  # padded steps: 0, as the harness writes them
            valid = jnp.arange(y.shape[1])[None, :] < lengths[:, None]
            y = jnp.where(valid[..., None], y, jnp.zeros((), y.dtype))
        for fc in finals:
            c, h = fc if SPEC["has_cell_state"] else (None, fc)
            hs.append(h)
            cs.append(c)
        x = y
    return x, jnp.stack(hs), (jnp.stack(cs) if SPEC["has_cell_state"] else None)


def run_framework():
    with jax.enable_x64(CALL["dtype"] == "float64"), jax.default_device(jax.devices("cpu")[0]):
        def cast(a):
            return None if a is None else jnp.asarray(np.asarray(a, dtype=np.float64), dtype=DTYPE)

        p = [[params(k, d, cast) for d in SPEC["directions"]] for k in range(SPEC["num_layers"])]
        lengths = (jnp.asarray(LENGTHS, dtype=jnp.int32) if CALL["lengths"] else None)
        y, h_n, c_n = jax.jit(forward)(p, cast(X), cast(H0), cast(C0), lengths)

        def f64(a):
            return None if a is None else np.asarray(a).astype(np.float64)

        return {{SPEC["num_layers"] - 1: f64(y)}}, f64(h_n), f64(c_n)
'''

NNX_LAYER = '''
def run_layer(params_k, x, carries, lengths):
    """nnx.RNN for one direction, nnx.Bidirectional for two; the cell built with zero
    initialisers, then its dense_i / dense_h parameters set to the handed ones."""
    H, zeros, cell_cls = SPEC["hidden_size"], nnx.initializers.zeros, getattr(nnx, CALL["cell"])

    def cell(in_features, tree):
        c = cell_cls(in_features, H, kernel_init=zeros, recurrent_kernel_init=zeros,
                     bias_init=zeros, param_dtype=tree["dense_i"]["kernel"].dtype,
                     rngs=nnx.Rngs(0))
        for dense, kinds in tree.items():
            for kind, value in kinds.items():
                getattr(getattr(c, dense), kind)[...] = value
        return c

    def rnn(tree, in_features, reverse):
        return nnx.RNN(cell(in_features, tree), return_carry=True, reverse=reverse,
                       keep_order=True, rngs=False)

    I = x.shape[-1]
    if len(SPEC["directions"]) == 2:
        layer = nnx.Bidirectional(rnn(params_k[0], I, False), rnn(params_k[1], I, True),
                                  return_carry=True, rngs=False)
        finals, y = layer(x, initial_carry=tuple(carries), seq_lengths=lengths)
        return y, list(finals)
    carry_, y = rnn(params_k[0], I, SPEC["dir_mode"] == "reverse")(
        x, initial_carry=carries[0], seq_lengths=lengths)
    return y, [carry_]

'''

LINEN_LAYER = '''
def run_layer(params_k, x, carries, lengths):
    """nn.RNN for one direction, nn.Bidirectional for two, applied with the handed tree."""
    H, cell_cls = SPEC["hidden_size"], getattr(nn, CALL["cell"])

    def rnn(reverse):
        return nn.RNN(cell_cls(features=H), return_carry=True, reverse=reverse, keep_order=True)

    if len(SPEC["directions"]) == 2:
        layer = nn.Bidirectional(rnn(False), rnn(True), return_carry=True)
        variables = {"params": {"forward_rnn": {"cell": params_k[0]},
                                "backward_rnn": {"cell": params_k[1]}}}
        finals, y = layer.apply(variables, x, initial_carry=tuple(carries), seq_lengths=lengths)
        return y, list(finals)
    carry_, y = rnn(SPEC["dir_mode"] == "reverse").apply(
        {"params": {"cell": params_k[0]}}, x, initial_carry=carries[0], seq_lengths=lengths)
    return y, [carry_]

'''


def _flax(record: ReproRecord) -> tuple[str, str]:
    call = record.handed.call
    nnx = call["api"] == "nnx"
    text = FLAX.format(api_import=("from flax import nnx  # noqa: E402" if nnx else
                                   "from flax import linen as nn  # noqa: E402"),
                       call=py_literal(call), run_layer=NNX_LAYER if nnx else LINEN_LAYER)
    return text, "JAX and Flax (pip install jax flax)"


# ONNX graphs ------------------------------------------------------------------------------

ONNX = '''
MODEL = os.path.join(HERE, "model.onnx")
CALL = {call}
FEEDS = {{name[len("feed/"):]: v for name, v in HANDED.items() if name.startswith("feed/")}}

{runtime}

def axes(a, src, dst):
    """a with axes named by the letters src put in the order dst."""
    return np.transpose(a, [src.index(letter) for letter in dst])


def run_framework():
    """Each layer's Y as [N, T, D*H], the final states as [layers * D, N, H], float64."""
    got = run_model()
    N, T = SPEC["batch"], SPEC["seq_len"]
    L, lstm = SPEC["num_layers"], SPEC["has_cell_state"]
    if CALL.get("read") == "module":  # an exported nn.LSTM / nn.GRU: y, h_n (, c_n)
        values = [np.asarray(got[name], dtype=np.float64) for name in CALL["outputs"]]
        return {{L - 1: values[0]}}, values[1], (values[2] if lstm else None)

    def state(name):
        return np.asarray(got[name], dtype=np.float64)

    ys = {{k: axes(state(f"Y{{k}}"), CALL["y_axes"], "NTDH").reshape(N, T, -1) for k in range(L)}}
    h_n = np.concatenate([axes(state(f"Y_h{{k}}"), CALL["state_axes"], "DNH") for k in range(L)])
    c_n = (np.concatenate([axes(state(f"Y_c{{k}}"), CALL["state_axes"], "DNH") for k in range(L)])
           if lstm else None)
    return ys, h_n, c_n
'''

RUNTIMES = {
    "onnxruntime": ('''import onnxruntime as ort  # noqa: E402


def framework_versions():
    return {"onnxruntime": ort.__version__}


def device():
    return "CPUExecutionProvider"


def run_model():
    options = ort.SessionOptions()
    options.log_severity_level = 3
    with open(MODEL, "rb") as f:
        sess = ort.InferenceSession(f.read(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, FEEDS)))
''', "ONNX Runtime (pip install onnxruntime)"),
    "openvino": ('''import io  # noqa: E402

# as the harness ran it: without openvino_telemetry, which ``import openvino`` would use to
# send a usage event and write a client id under ~/intel
sys.modules.setdefault("openvino_telemetry", None)
import openvino as ov  # noqa: E402
from openvino.frontend import FrontEndManager  # noqa: E402


def framework_versions():
    return {"openvino": ov.__version__}


def device():
    return "CPU plugin " + ov.Core().get_property("CPU", "FULL_DEVICE_NAME")


def run_model():
    """The ONNX frontend reads the model's bytes; the CPU plugin compiles it with the
    inference precision pinned (its default on a CPU with bf16 is bf16)."""
    frontend = FrontEndManager().load_by_framework("onnx")
    with open(MODEL, "rb") as f:
        model = frontend.convert(frontend.load(io.BytesIO(f.read())))
    compiled = ov.Core().compile_model(model, "CPU", CALL["compile_config"])
    return {port.get_any_name(): value for port, value in compiled(FEEDS).items()}
''', "OpenVINO (pip install openvino)"),
    "onnx-reference": ('''import onnx  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def framework_versions():
    return {"onnx": onnx.__version__}


def device():
    return "onnx.reference (NumPy)"


def run_model():
    evaluator = ReferenceEvaluator(onnx.load(MODEL))
    names = list(evaluator.output_names)
    return dict(zip(names, evaluator.run(names, FEEDS)))
''', "onnx (pip install onnx)"),
}


def _onnx(record: ReproRecord) -> tuple[str, str]:
    call = record.handed.call
    runtime, needs = RUNTIMES[call["runtime"]]
    return ONNX.format(call=py_literal(call), runtime=runtime), needs


# PyTorch -------------------------------------------------------------------------------------

TORCH = '''
import torch  # noqa: E402

CALL = {call}


def framework_versions():
    return {{"torch": torch.__version__}}


def device():
    if CALL["device"] == "cuda":
        return f"{{torch.cuda.get_device_name()}} (CUDA {{torch.version.cuda}}, cuDNN " \\
               f"{{torch.backends.cudnn.version()}})"
    return "cpu, torch.compile (Inductor)" if "compile" in CALL else "cpu"


def tf32(allow):
    """cuDNN's TF32 for RNNs, as the harness held it (the per-op API of torch >= 2.9, else the
    legacy flag)."""
    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):
        rnn.fp32_precision = "tf32" if allow else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = allow


def run_framework():
    if "cudnn_rnn_tf32" in CALL:
        tf32(CALL["cudnn_rnn_tf32"])
    dtype, dev = getattr(torch, CALL["dtype"]), CALL["device"]
    module = getattr(torch.nn, CALL["module"])(**CALL["kwargs"], dtype=dtype, device=dev)
    module.load_state_dict({{k: torch.from_numpy(np.ascontiguousarray(v))
                            for k, v in HANDED.items()}}, strict=True)
    module.eval()
    if "compile" in CALL:  # as the torch-compile adapter ran it: dynamo with allow_rnn, Inductor
        from torch import _dynamo

        _dynamo.config.allow_rnn = CALL["compile"]["allow_rnn"]
        module = torch.compile(module)

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=dev, dtype=dtype)

    def n(a):
        return a.detach().to(device="cpu", dtype=torch.float64).numpy()

    x, h0 = t(X), t(H0)
    state = (h0, t(C0)) if C0 is not None else h0
    with torch.no_grad():
        if CALL["lengths"]:
            packed = torch.nn.utils.rnn.pack_padded_sequence(
                x, torch.as_tensor(LENGTHS), batch_first=True, enforce_sorted=False)
            y, hc = module(packed, state)
            y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True,
                                                          total_length=SPEC["seq_len"])
        else:
            y, hc = module(x, state)
    h_n, c_n = hc if C0 is not None else (hc, None)
    return {{SPEC["num_layers"] - 1: n(y)}}, n(h_n), (None if c_n is None else n(c_n))
'''


def _torch(record: ReproRecord) -> tuple[str, str]:
    return TORCH.format(call=py_literal(record.handed.call)), "PyTorch (pip install torch)"


# Keras (tf_keras, Keras 3 on TensorFlow) -------------------------------------------------------

KERAS = '''
{backend}import importlib  # noqa: E402

import tensorflow as tf  # noqa: E402

CALL = {call}
K = importlib.import_module(CALL["module"])  # tf_keras, or Keras 3
NAMES = ("forward", "backward")


def framework_versions():
    return {{"tensorflow": tf.__version__, CALL["module"]: K.__version__}}


def device():
    return CALL["device"] + " (" + ", ".join(d.name for d in tf.config.list_physical_devices()) \\
        + " visible)"


def short_name(variable):
    return variable.name.split("/")[-1].split(":")[0]  # tf_keras: gru/gru_cell/kernel:0


def run_framework():
    """The stack (keras_stack, below) in TensorFlow tensors on CALL's device."""
    lstm, dtype = SPEC["has_cell_state"], CALL["dtype"]
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype

    def tensor(a):
        return tf.constant(np.asarray(a).astype(np_dtype), dtype=dtype)

    with tf.device(CALL["device"]):
        mask = None
        if CALL["lengths"]:
            mask = tf.constant(np.arange(SPEC["seq_len"])[None, :] < LENGTHS[:, None])
        c0 = [tensor(c) for c in C0] if lstm else []
        return keras_stack(K.layers, tensor(X), [tensor(h) for h in H0], c0, mask, HANDED,
                           dtype, np_dtype, flip=lambda y: tf.reverse(y, axis=[1]),
                           masked=lambda y, m: y * tf.cast(m, y.dtype)[:, :, None],
                           f64=lambda t: np.asarray(t.numpy()).astype(np.float64))
'''


KERAS_STACK = '''

def keras_stack(layers, x, h0, c0, mask, weights, dtype, np_dtype, flip, masked, f64):
    """One Keras layer per case layer (Bidirectional for two directions, go_backwards for the
    reverse one), built in the case dtype with CALL's keyword arguments, its cell variables set
    by name from ``weights``, called eagerly with the initial states (and a mask for lengths);
    a reverse layer's y flipped back into input time order, and padded steps of a
    one-direction masked layer zeroed (Keras repeats the last valid output there)."""
    L, D, H = SPEC["num_layers"], len(SPEC["directions"]), SPEC["hidden_size"]
    lstm = SPEC["has_cell_state"]
    cls = getattr(layers, CALL["cls"])
    ys, h_n, c_n = {}, [], []
    for k in range(L):
        if D == 2:
            rnn = layers.Bidirectional(cls(**CALL["kwargs"]), dtype=dtype)
        else:
            rnn = cls(go_backwards=SPEC["dir_mode"] == "reverse", **CALL["kwargs"])
        rnn.build((SPEC["batch"], SPEC["seq_len"], SPEC["input_size"] if k == 0 else D * H))
        subs = ([(0, rnn.forward_layer), (1, rnn.backward_layer)] if D == 2
                else [(SPEC["directions"][0], rnn)])
        for d, sub in subs:
            prefix = "" if L == 1 and D == 1 else f"layer{k}/{NAMES[d]}/"
            sub.set_weights([weights[prefix + short_name(v)].astype(np_dtype)
                             for v in sub.weights])
        states = []
        for j in range(D):
            states += [h0[k * D + j]] + ([c0[k * D + j]] if lstm else [])
        y, *finals = rnn(x, initial_state=states, mask=mask)
        if SPEC["dir_mode"] == "reverse":
            y = flip(y)
        if mask is not None and D == 1:
            y = masked(y, mask)
        n = 2 if lstm else 1
        for j in range(D):
            h_n.append(f64(finals[j * n]))
            if lstm:
                c_n.append(f64(finals[j * n + 1]))
        ys[k] = f64(y)
        x = y
    return ys, np.stack(h_n), (np.stack(c_n) if lstm else None)
'''


def _keras(record: ReproRecord) -> tuple[str, str]:
    call = record.handed.call
    keras3 = call["module"] == "keras"
    backend = ('os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # as the harness ran it\n'
               if keras3 else "")
    needs = ("TensorFlow and Keras 3 (pip install tensorflow keras)" if keras3 else
             "TensorFlow and tf_keras (pip install tensorflow tf_keras)")
    return (KERAS.format(backend=backend, call=py_literal(call))
            + KERAS_STACK), needs


# Converted models: LiteRT (.tflite), ExecuTorch (.pte) ------------------------------------------

TFLITE = '''
import importlib.metadata  # noqa: E402

from ai_edge_litert.interpreter import Interpreter, OpResolverType  # noqa: E402

MODEL = os.path.join(HERE, "model.tflite")
CALL = {call}
FEEDS = {{name: HANDED["feed/" + name] for name in CALL["inputs"]}}
ABSENT = CALL["absent"]


def framework_versions():
    return {{"ai_edge_litert": importlib.metadata.version("ai-edge-litert")}}


def device():
    return f"CPU, LiteRT interpreter ({{CALL['op_resolver'] or 'default'}} op resolver)"


def run_model():
    """The model's outputs by name, run as the harness ran it: under CALL's op resolver (None:
    the interpreter's default), through its one signature fed by keyword, or input tensor by
    input tensor (set_tensor, invoke, get_tensor)."""
    kwargs = {{}}
    if CALL["op_resolver"] is not None:
        kwargs["experimental_op_resolver_type"] = getattr(OpResolverType, CALL["op_resolver"])
    with open(MODEL, "rb") as f:
        interpreter = Interpreter(model_content=f.read(), **kwargs)
    if CALL["runner"] == "signature":
        return dict(interpreter.get_signature_runner()(**FEEDS))
    interpreter.allocate_tensors()
    by_name = {{d["name"]: d["index"] for d in interpreter.get_input_details()}}
    for name in CALL["inputs"]:
        interpreter.set_tensor(by_name[name], FEEDS[name])
    interpreter.invoke()
    return {{d["name"]: interpreter.get_tensor(d["index"])
            for d in interpreter.get_output_details()}}


def run_framework():
    """y per layer, h_n, c_n (float64) from the model's outputs by their roles (readout,
    above); h_n read from y where the model outputs y only and y determines it."""
    ys, h_n, c_n = readout(run_model(), CALL["roles"], SPEC["num_layers"])
    if h_n is None and CALL["h_n"] == "from_y":
        h_n = h_n_from_y(ys[SPEC["num_layers"] - 1], SPEC["directions"], SPEC["hidden_size"])
    return ys, h_n, c_n
'''


def _tflite(record: ReproRecord) -> tuple[str, str]:
    needs = "ai-edge-litert (pip install ai-edge-litert)"
    return TFLITE.format(call=py_literal(record.handed.call)), needs


EXECUTORCH = '''
import importlib.metadata  # noqa: E402

import torch  # noqa: E402
from executorch.runtime import Runtime, Verification  # noqa: E402

MODEL = os.path.join(HERE, "model.pte")
CALL = {call}
FEEDS = {{name: HANDED["feed/" + name] for name in CALL["inputs"]}}
ABSENT = CALL["absent"]


def framework_versions():
    return {{"torch": torch.__version__, "executorch": importlib.metadata.version("executorch")}}


def device():
    kernels = (f"{{CALL['delegate'].upper()}} delegate and portable kernels" if CALL["delegate"]
               else "portable kernels only")
    return f"CPU, ExecuTorch runtime ({{kernels}})"


def run_model():
    """The program's method run as the harness ran it: loaded from the bytes of model.pte, its
    inputs as torch tensors in CALL's order; its outputs by position ("0", "1", ...)."""
    with open(MODEL, "rb") as f:
        program = Runtime.get().load_program(
            f.read(), verification=getattr(Verification, CALL["verification"]))
    method = program.load_method(CALL["method"])
    got = method.execute([torch.from_numpy(np.ascontiguousarray(FEEDS[name]))
                          for name in CALL["inputs"]])
    return {{str(k): g.detach().to(torch.float64).numpy() for k, g in enumerate(got)}}


def run_framework():
    """y, h_n, c_n (float64) from the program's outputs by their roles (readout, above)."""
    return readout(run_model(), CALL["roles"], SPEC["num_layers"])
'''


def _executorch(record: ReproRecord) -> tuple[str, str]:
    return (EXECUTORCH.format(call=py_literal(record.handed.call)),
            "PyTorch and ExecuTorch (pip install torch executorch)")


# Keras 3 on another backend (torch, OpenVINO) ---------------------------------------------------

KERAS3_BACKEND = '''
import importlib.metadata  # noqa: E402

CALL = {call}
# As the harness ran it: Keras 3 reads its backend once, at import, so the worker's environment
# (KERAS_BACKEND; KERAS_TORCH_DEVICE=cpu on torch) is set first, and the modules the harness
# kept out of that worker stay out (TensorFlow, which Keras imports only for an isinstance
# test when it clones a Bidirectional's layer; OpenVINO's telemetry)
os.environ.update(CALL["environ"])
for _name in CALL["blocked"]:
    sys.modules.setdefault(_name, None)
import keras  # noqa: E402
from keras import ops  # noqa: E402

PARAMS = {{k[len("param/"):]: v for k, v in HANDED.items() if k.startswith("param/")}}
NAMES = ("forward", "backward")


def framework_versions():
    return {{"keras": keras.__version__, "keras_backend": keras.backend.backend(),
            CALL["backend"]: importlib.metadata.version(CALL["backend"])}}


def device():
    return f"CPU, Keras 3 on the {{keras.backend.backend()}} backend (eager)"


def np_type(dtype):
    if dtype == "bfloat16":  # NumPy has no bfloat16; Keras depends on ml_dtypes, which has
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(dtype).type


def short_name(variable):
    return variable.name.split("/")[-1].split(":")[0]  # Keras 3: kernel, recurrent_kernel, bias


def run_framework():
    """The stack (keras_stack, below) in keras.ops tensors of CALL's backend."""
    if keras.backend.backend() != CALL["backend"]:
        sys.exit(f"Keras 3 loaded the {{keras.backend.backend()!r}} backend, not "
                 f"{{CALL['backend']!r}}: run this script in a fresh Python process")
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
    return keras_stack(keras.layers, tensor(HANDED["feed/x"]),
                       [tensor(h) for h in HANDED["feed/h0"]], c0, mask, PARAMS, dtype,
                       np_dtype, flip=lambda y: ops.flip(y, axis=1),
                       masked=lambda y, m: y * ops.cast(m, y.dtype)[:, :, None], f64=f64)
'''

BACKEND_NEEDS = {"torch": "Keras 3 and PyTorch (pip install keras torch)",
                 "openvino": "Keras 3 and OpenVINO (pip install keras openvino)"}


def _keras3_backend(record: ReproRecord) -> tuple[str, str]:
    call = record.handed.call
    needs = BACKEND_NEEDS.get(call["backend"], f"Keras 3 and {call['backend']}")
    return KERAS3_BACKEND.format(call=py_literal(call)) + KERAS_STACK, needs


# MLX ------------------------------------------------------------------------------------------

MLX = '''
import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402

CALL = {call}
PARAMS = {{k[len("param/"):]: v for k, v in HANDED.items() if k.startswith("param/")}}


def framework_versions():
    return {{"mlx": mx.__version__}}


def device():
    return str(mx.default_device())


def run_framework():
    """The stack as the harness ran it (run_stack, above): one mlx.nn module per layer and
    direction, built with CALL's arguments and its parameters set by MLX's names, on the CPU,
    fed the inputs the adapter got; the initial state omitted (hidden=None) where CALL says."""
    mx.set_default_device(mx.cpu)

    def module(layer):
        return getattr(nn, CALL["module"])(CALL["input_sizes"][layer], CALL["hidden_size"],
                                           bias=CALL["bias"])

    ys, h_n, c_n = run_stack(
        mx, module, PARAMS, HANDED["feed/x"], HANDED["feed/h0"], HANDED.get("feed/c0"),
        dtype=getattr(mx, CALL["dtype"]), num_layers=SPEC["num_layers"],
        directions=SPEC["directions"], lstm=SPEC["has_cell_state"],
        omit_state=CALL["initial_state"] == "omitted")
    return dict(enumerate(ys)), h_n, c_n
'''


def _mlx(record: ReproRecord) -> tuple[str, str]:
    return MLX.format(call=py_literal(record.handed.call)), "MLX (pip install 'mlx[cpu]')"


RENDERERS: dict[str, Callable[[ReproRecord], tuple[str, str]]] = {
    "flax": _flax, "onnx": _onnx, "torch": _torch, "keras": _keras, "tflite": _tflite,
    "executorch": _executorch, "mlx": _mlx,
    "keras3-backend": _keras3_backend}
"""Handed.family -> (the framework part of the script, what it needs installed)."""

CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "flax": {"api": ("nnx", "linen")}, "onnx": {"runtime": tuple(RUNTIMES)},
    "keras": {"module": ("keras", "tf_keras")}}
"""Handed.family -> the keys of ``Handed.call`` that choose the text of its script, with the
values that do: each script a family renders is one value of each (every other value of the
call is data written into the script as a literal)."""

READOUT = ("tflite", "executorch")
"""The families whose script reads a converted model's outputs with harness/repro/readout.py,
the adapter's own code."""

PASTED: dict[str, Callable[[], str]] = {"tflite": readout.source, "executorch": readout.source,
                                        "mlx": mlx_stack.source}
"""Handed.family -> the adapter's own pure-NumPy code its script runs, pasted into it."""


def script(record: ReproRecord) -> str:
    """The whole ``repro.py`` of ``record`` (which has a handed record of a known family and a
    question this harness knows: :func:`harness.repro.questions.of`)."""
    assert record.handed is not None
    framework, needs = RENDERERS[record.handed.family](record)
    pasted = PASTED.get(record.handed.family)
    pasted_text = pasted() + "\n" if pasted is not None else ""
    question = questions.of(record)
    assert question is not None
    head, tail = question.script(record, needs)
    return (head + _data_block(data_arrays(record)) + INPUTS + "\n\n" + equations.source()
            + "\n" + pasted_text + framework + SHARED + tail)


def needs(record: ReproRecord) -> str:
    assert record.handed is not None
    return RENDERERS[record.handed.family](record)[1]
