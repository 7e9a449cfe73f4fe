"""ONNX ``LSTM`` / ``GRU`` nodes built with ``onnx.helper``, run by ONNX Runtime on CPU.

Layout ``onnx``.

One graph per case: one node per layer, time-major (``layout=0``: ORT's CPU kernels reject the
batch-major ``layout=1``, docs/layouts.md, onnx). Layer k+1 reads layer k's ``Y`` [T, D, N, H]
transposed to [T, N, D, H] and reshaped to [T, N, D*H] (forward features first). The weights
are initializers named as in the layout (``W``, ``R``, ``B``, ``P`` or ``layer{k}/W`` ...); the
data (``X``, ``sequence_lens``, ``initial_h``/``initial_c`` per layer) are graph inputs.

Case features map to node attributes: ``gate_clip`` -> ``clip``, ``input_forget``,
``reset_after`` -> GRU ``linear_before_reset``, hard sigmoids -> ``activations`` with
``HardSigmoid`` and its ``alpha``/``beta``. With ``sequence_lens`` ORT writes zeros at padded
steps of ``Y``, returns each sequence's state at its last valid step in ``Y_h``/``Y_c``, and
starts the reverse direction at the last valid step (docs/layouts.md, onnx; Variable lengths and
padding), which is the harness
convention already: nothing is patched here.
"""

from __future__ import annotations

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.layouts.onnx import tensor_name
from harness.spec import Case

# LSTM-22 / GRU-22 are the newest schemas in onnx 1.23; ORT 1.31 rejects models with onnx
# 1.23's IR version 14 ("Unsupported model IR version"), so pin IR 10 (onnx 1.17, opset 22).
OPSET = 22
IR_VERSION = 10

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}

# HardSigmoid(x) = max(0, min(1, alpha * x + beta)) (ONNX operator definition).
HARD_SIGMOID = {"hard_sigmoid_tf_keras": (0.2, 0.5), "hard_sigmoid_keras3": (1.0 / 6.0, 0.5)}


def import_onnxruntime():
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise Unavailable(
            f"onnx/onnxruntime is not installed ({exc}); pip install onnx onnxruntime") from None
    return onnx, onnxruntime


def node_attributes(case: Case) -> dict:
    """Attributes of every layer's LSTM / GRU node for ``case``."""
    attrs: dict = {
        "hidden_size": case.hidden_size,
        "direction": case.dir_mode,  # forward | reverse | bidirectional: ONNX's own words
        "layout": 0,
    }
    if case.gate_clip is not None:
        attrs["clip"] = float(case.gate_clip)
    if case.cell == "lstm" and case.input_forget:
        attrs["input_forget"] = 1
    if case.cell == "gru":
        attrs["linear_before_reset"] = int(case.reset_after)
    if case.recurrent_activation in HARD_SIGMOID:
        alpha, beta = HARD_SIGMOID[case.recurrent_activation]
        # One (f, g[, h]) triple per direction; ORT hands alpha/beta only to the activations
        # that take them (Tanh takes none), so one value per direction.
        per_dir = ["HardSigmoid", "Tanh"] + (["Tanh"] if case.cell == "lstm" else [])
        attrs["activations"] = per_dir * case.num_directions
        attrs["activation_alpha"] = [alpha] * case.num_directions
        attrs["activation_beta"] = [beta] * case.num_directions
    return attrs


def build_model(case: Case, native: dict[str, np.ndarray], *, lengths: bool | None = None):
    """The ONNX model (onnx.ModelProto) of ``case``: weights ``native`` cast to the case dtype.

    Inputs: ``X`` [T, N, I]; ``sequence_lens`` [N] int32 when there are lengths (``lengths``:
    whether the Inputs hold them; by default, whether the case names them);
    ``initial_h{k}`` [D, N, H] (and ``initial_c{k}`` for LSTM) per layer k.
    Outputs per layer k: ``Y{k}`` [T, D, N, H], ``Y_h{k}`` [D, N, H] (and ``Y_c{k}``).
    """
    onnx, _ = import_onnxruntime()
    from onnx import helper, numpy_helper

    np_dtype = NUMPY_DTYPES[case.dtype]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    T, N, D, H = case.seq_len, case.batch, case.num_directions, case.hidden_size
    lstm = case.cell == "lstm"
    if lengths is None:
        lengths = case.seq_lengths is not None

    initializers = [numpy_helper.from_array(np.asarray(v, dtype=np_dtype), name)
                    for name, v in native.items()]
    if case.num_layers > 1:  # Reshape's target shape [T, N, D*H] between layers
        initializers.append(
            numpy_helper.from_array(np.array([0, 0, -1], dtype=np.int64), "merge_dirs"))
    inputs = [helper.make_tensor_value_info("X", elem, [T, N, case.input_size])]
    if lengths:
        inputs.append(helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32, [N]))
    outputs, nodes = [], []
    attrs = node_attributes(case)
    x = "X"
    for k in range(case.num_layers):
        def w(name: str, k: int = k) -> str:
            return tensor_name(case, k, name)

        states = [f"initial_h{k}"] + ([f"initial_c{k}"] if lstm else [])
        inputs += [helper.make_tensor_value_info(s, elem, [D, N, H]) for s in states]
        node_in = [x, w("W"), w("R"), w("B"),
                   "sequence_lens" if lengths else "", *states]
        if lstm and case.peepholes:
            node_in.append(w("P"))
        node_out = [f"Y{k}", f"Y_h{k}"] + ([f"Y_c{k}"] if lstm else [])
        nodes.append(helper.make_node(case.cell.upper(), node_in, node_out, name=f"layer{k}",
                                      **attrs))
        outputs.append(helper.make_tensor_value_info(f"Y{k}", elem, [T, D, N, H]))
        outputs += [helper.make_tensor_value_info(o, elem, [D, N, H]) for o in node_out[1:]]
        if k + 1 < case.num_layers:
            # [T, D, N, H] -> [T, N, D, H] -> [T, N, D*H]: the next layer's X, forward first.
            nodes.append(helper.make_node("Transpose", [f"Y{k}"], [f"Y{k}_tndh"],
                                          perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [f"Y{k}_tndh", "merge_dirs"], [f"X{k + 1}"]))
            x = f"X{k + 1}"
    graph = helper.make_graph(nodes, f"rnn-harness-{case.name}", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION, producer_name="rnn-harness")


def feeds(case: Case, inputs: Inputs) -> dict[str, np.ndarray]:
    """Graph inputs from harness data: x batch-major -> time-major, states split per layer.
    Lengths and initial states come from ``inputs`` alone (where the case's seq_lengths and an
    inputs file's already agree, :func:`harness.prepare.load_inputs`)."""
    np_dtype = NUMPY_DTYPES[case.dtype]
    D = case.num_directions
    out = {"X": np.ascontiguousarray(inputs.x.transpose(1, 0, 2), dtype=np_dtype)}
    if inputs.seq_lengths is not None:
        out["sequence_lens"] = np.asarray(inputs.seq_lengths, dtype=np.int32)
    for k in range(case.num_layers):
        # h0 [L*D, N, H] is layer-major, forward before reverse: layer k's slice is [D, N, H].
        out[f"initial_h{k}"] = np.asarray(inputs.h0[k * D:(k + 1) * D], dtype=np_dtype)
        if case.cell == "lstm":
            out[f"initial_c{k}"] = np.asarray(inputs.c0[k * D:(k + 1) * D], dtype=np_dtype)
    return out


class OnnxRuntime(Adapter):
    name = "onnxruntime"
    title = "ONNX LSTM/GRU nodes in ONNX Runtime (CPU)"
    framework = "onnx"
    requires = ("onnx", "onnxruntime")
    layout_name = "onnx"
    native_in_case_dtype = True
    capabilities = Capabilities(
        directions=frozenset({"forward", "reverse", "bidirectional"}),
        # ORT's CPU LSTM/GRU kernels reject double ("does not support double yet"). A float16
        # model runs: ORT inserts Casts and computes the node in float32 (no float16 kernel).
        dtypes=frozenset({"float32", "float16"}),
        peepholes=True,
        gate_clip=True,
        input_forget=True,
        recurrent_activations=frozenset(
            {"sigmoid", "hard_sigmoid_tf_keras", "hard_sigmoid_keras3"}),
        reasons={
            "dtypes": "ONNX Runtime CPU LSTM/GRU: no float64 ('does not support double yet') "
                      "and no bfloat16 kernels (float32, and float16 via inserted Casts, only)",
            "projection": "ONNX LSTM has no projection (no Wp / proj_size)",
            "projection_layers": "ONNX LSTM has no projection (no Wp / proj_size)",
            "cell_clip": "ONNX LSTM has no cell-state clipping (its clip attribute clamps gate "
                         "pre-activations, which is gate_clip, not cell_clip)",
            "proj_clip": "ONNX LSTM has no projection, so no projection clipping",
        },
    )

    def check_available(self) -> None:
        import_onnxruntime()

    def versions(self) -> dict[str, str]:
        onnx, ort = import_onnxruntime()
        return {"onnx": onnx.__version__, "onnxruntime": ort.__version__}

    def session(self, case: Case, native: dict[str, np.ndarray], *,
                lengths: bool | None = None):
        """An ORT InferenceSession (CPU provider) of :func:`build_model`."""
        _, ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: ORT warns about unused initializers etc.
        return ort.InferenceSession(build_model(case, native, lengths=lengths).SerializeToString(),
                                    options, providers=["CPUExecutionProvider"])

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        sess = self.session(case, native, lengths=inputs.seq_lengths is not None)
        names = [o.name for o in sess.get_outputs()]
        got = dict(zip(names, sess.run(names, feeds(case, inputs)), strict=True))
        N, T = case.batch, case.seq_len

        def f64(a: np.ndarray) -> np.ndarray:
            return np.asarray(a, dtype=np.float64)

        # Y [T, D, N, H] -> [N, T, D, H] -> [N, T, D*H]: the direction axis becomes features.
        y_layers = [f64(got[f"Y{k}"]).transpose(2, 0, 1, 3).reshape(N, T, -1)
                    for k in range(case.num_layers)]
        h_n = np.concatenate([f64(got[f"Y_h{k}"]) for k in range(case.num_layers)])
        c_n = (np.concatenate([f64(got[f"Y_c{k}"]) for k in range(case.num_layers)])
               if case.cell == "lstm" else None)
        return Outputs(y=y_layers[-1], h_n=h_n, c_n=c_n, y_layers=y_layers)
