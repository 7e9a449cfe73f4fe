"""The harness's own ONNX ``LSTM`` / ``GRU`` graph, what the adapters that run it share with
``compare``, ``convert`` and the API: the graph (:func:`build_model`), its inputs from harness
data (:func:`feeds`) and its outputs back in harness conventions (:func:`read_outputs`). The
runtimes differ (ONNX Runtime, OpenVINO, the ``onnx.reference`` evaluator), the graph does not:
layout ``onnx`` for the weights, one node per layer.

The node's ``layout`` attribute (0 time-major, 1 batch-major) is data here: the axis orders of
``X``, ``Y`` and the states for each value are :data:`harness.layouts.onnx.DATA_AXES`, and the
same three functions transpose by those letters, so a batch-major graph is built, fed and read
by the code that builds, feeds and reads a time-major one. Layer k+1 reads layer k's ``Y`` with
its axes put in ``X``'s order, direction before hidden (``[T, N, D, H]`` time-major, no
transpose batch-major), reshaped to ``[., ., D*H]`` (forward features first).

Weights are initializers named as in the layout (``W``, ``R``, ``B``, ``P`` or ``layer{k}/W``
...); the data (``X``, ``sequence_lens``, ``initial_h``/``initial_c`` per layer) are graph
inputs. Case features map to node attributes: ``gate_clip`` -> ``clip``, ``input_forget``,
``reset_after`` -> GRU ``linear_before_reset``, hard sigmoids -> ``activations`` with
``HardSigmoid`` and its ``alpha``/``beta``.
"""

from __future__ import annotations

import numpy as np

from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.families.onnx import read_graph_outputs
from harness.handed import Handed
from harness.layouts.onnx import DATA_AXES, tensor_name
from harness.spec import Case

# LSTM-22 / GRU-22 are the newest schemas in onnx 1.23; ORT 1.31 rejects models with onnx
# 1.23's IR version 14 ("Unsupported model IR version"), so pin IR 10 (onnx 1.17, opset 22).
OPSET = 22
# the route note of an adapter that runs this module's graph (OpenVINO, ONNX Runtime,
# onnx.reference): it judges the runtime on a graph written from the equations, not the graph
# a user's exporter writes (the torch-onnx-* adapters run those)
HARNESS_GRAPH = ("ran the harness's own ONNX graph (harness/frameworks/onnx.py), not a "
                 "framework's export of the model: an exporter's graph is judged by the "
                 "torch-onnx-* adapters")
IR_VERSION = 10

NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}

# HardSigmoid(x) = max(0, min(1, alpha * x + beta)) (ONNX operator definition).
HARD_SIGMOID = {"hard_sigmoid_tf_keras": (0.2, 0.5), "hard_sigmoid_keras3": (1.0 / 6.0, 0.5)}

# Not-applicable reasons of every runtime of this graph: what the ONNX operators cannot express.
ONNX_REASONS = {
    "projection": "ONNX LSTM has no projection (no Wp / proj_size)",
    "projection_layers": "ONNX LSTM has no projection (no Wp / proj_size)",
    "cell_clip": "ONNX LSTM has no cell-state clipping (its clip attribute clamps gate "
                 "pre-activations, which is gate_clip, not cell_clip)",
    "proj_clip": "ONNX LSTM has no projection, so no projection clipping",
}


def import_onnx():
    try:
        import onnx
    except ImportError as exc:
        raise Unavailable(f"onnx is not installed ({exc}); pip install onnx") from None
    return onnx


def import_onnxruntime():
    """(onnx, onnxruntime), or Unavailable."""
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise Unavailable(
            f"onnx/onnxruntime is not installed ({exc}); pip install onnx onnxruntime") from None
    return onnx, onnxruntime


def permutation(src: str, dst: str) -> list[int]:
    """The ``np.transpose`` axes taking a tensor with axes named ``src`` (letters, e.g.
    ``TDNH``) to the order ``dst`` (``NTDH``)."""
    assert sorted(src) == sorted(dst), (src, dst)
    return [src.index(axis) for axis in dst]


def node_attributes(case: Case, layout: int = 0) -> dict:
    """Attributes of every layer's LSTM / GRU node for ``case``, ``layout`` its data layout."""
    attrs: dict = {
        "hidden_size": case.hidden_size,
        "direction": case.dir_mode,  # forward | reverse | bidirectional: ONNX's own words
        "layout": layout,
    }
    if case.gate_clip is not None:
        attrs["clip"] = float(case.gate_clip)
    if case.input_forget:
        attrs["input_forget"] = 1
    if case.cell_kind.reads("reset_after"):
        attrs["linear_before_reset"] = int(case.reset_after)
    if case.recurrent_activation in HARD_SIGMOID:
        alpha, beta = HARD_SIGMOID[case.recurrent_activation]
        # One (f, g[, h]) triple per direction; ORT hands alpha/beta only to the activations
        # that take them (Tanh takes none), so one value per direction.
        per_dir = ["HardSigmoid", "Tanh"] + (["Tanh"] if case.cell_kind.has_cell_state else [])
        attrs["activations"] = per_dir * case.num_directions
        attrs["activation_alpha"] = [alpha] * case.num_directions
        attrs["activation_beta"] = [beta] * case.num_directions
    return attrs


def _sizes(case: Case) -> dict[str, int]:
    """Each axis letter of :data:`DATA_AXES` -> its size in ``case``."""
    return {"T": case.seq_len, "N": case.batch, "I": case.input_size,
            "D": case.num_directions, "H": case.hidden_size}


def build_model(case: Case, native: dict[str, np.ndarray], *, lengths: bool | None = None,
                layout: int = 0, dtype: type | None = None):
    """The ONNX model (onnx.ModelProto) of ``case``: weights ``native`` cast to ``dtype`` (by
    default the case dtype's, :data:`NUMPY_DTYPES`), data axes as ``layout`` says.

    Inputs: ``X`` ([T, N, I] at layout 0, [N, T, I] at 1); ``sequence_lens`` [N] int32 when
    there are lengths (``lengths``: whether the Inputs hold them; by default, whether the case
    names them); ``initial_h{k}`` ([D, N, H] / [N, D, H]), and ``initial_c{k}`` for LSTM, per
    layer k. Outputs per layer k: ``Y{k}`` ([T, D, N, H] / [N, T, D, H]), ``Y_h{k}`` (and
    ``Y_c{k}``) shaped as the states.
    """
    onnx = import_onnx()
    from onnx import helper, numpy_helper

    np_dtype = dtype or NUMPY_DTYPES[case.dtype]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    axes = DATA_AXES[layout]
    size = _sizes(case)

    def shape(letters: str) -> list[int]:
        return [size[a] for a in letters]

    lstm = case.cell_kind.has_cell_state
    if lengths is None:
        lengths = case.seq_lengths is not None

    initializers = [numpy_helper.from_array(np.asarray(v, dtype=np_dtype), name)
                    for name, v in native.items()]
    if case.num_layers > 1:  # Reshape's target [., ., D*H] between layers
        initializers.append(
            numpy_helper.from_array(np.array([0, 0, -1], dtype=np.int64), "merge_dirs"))
    inputs = [helper.make_tensor_value_info("X", elem, shape(axes.x))]
    if lengths:
        inputs.append(helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32,
                                                    [case.batch]))
    outputs, nodes = [], []
    attrs = node_attributes(case, layout)
    # Y's axes in X's order with the directions before the features: [T, N, D, H] / [N, T, D, H]
    to_next = permutation(axes.y, axes.x.replace("I", "DH"))
    x = "X"
    for k in range(case.num_layers):
        def w(name: str, k: int = k) -> str:
            return tensor_name(case, k, name)

        states = [f"initial_h{k}"] + ([f"initial_c{k}"] if lstm else [])
        inputs += [helper.make_tensor_value_info(s, elem, shape(axes.state)) for s in states]
        node_in = [x, w("W"), w("R"), w("B"),
                   "sequence_lens" if lengths else "", *states]
        if lstm and case.peepholes:
            node_in.append(w("P"))
        node_out = [f"Y{k}", f"Y_h{k}"] + ([f"Y_c{k}"] if lstm else [])
        nodes.append(helper.make_node(case.cell.upper(), node_in, node_out, name=f"layer{k}",
                                      **attrs))
        outputs.append(helper.make_tensor_value_info(f"Y{k}", elem, shape(axes.y)))
        outputs += [helper.make_tensor_value_info(o, elem, shape(axes.state))
                    for o in node_out[1:]]
        if k + 1 < case.num_layers:
            y = f"Y{k}"
            if to_next != sorted(to_next):
                nodes.append(helper.make_node("Transpose", [y], [f"Y{k}_xdh"], perm=to_next))
                y = f"Y{k}_xdh"
            nodes.append(helper.make_node("Reshape", [y, "merge_dirs"], [f"X{k + 1}"]))
            x = f"X{k + 1}"
    graph = helper.make_graph(nodes, f"rnn-harness-{case.name}", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION, producer_name="rnn-harness")


def feeds(case: Case, inputs: Inputs, *, layout: int = 0,
          dtype: type | None = None) -> dict[str, np.ndarray]:
    """Graph inputs from harness data: x [N, T, I] and each layer's states [D, N, H] put in
    ``layout``'s axis order. Lengths and initial states come from ``inputs`` alone (where the
    case's seq_lengths and an inputs file's already agree, :func:`harness.prepare.load_inputs`)."""
    np_dtype = dtype or NUMPY_DTYPES[case.dtype]
    axes = DATA_AXES[layout]
    D = case.num_directions
    x_axes, state_axes = permutation("NTI", axes.x), permutation("DNH", axes.state)
    out = {"X": np.ascontiguousarray(inputs.x.transpose(x_axes), dtype=np_dtype)}
    if inputs.seq_lengths is not None:
        out["sequence_lens"] = np.asarray(inputs.seq_lengths, dtype=np.int32)
    for k in range(case.num_layers):
        # h0 [L*D, N, H] is layer-major, forward before reverse: layer k's slice is [D, N, H].
        layer = slice(k * D, (k + 1) * D)
        out[f"initial_h{k}"] = np.ascontiguousarray(inputs.h0[layer].transpose(state_axes),
                                                    dtype=np_dtype)
        if case.cell_kind.has_cell_state:
            out[f"initial_c{k}"] = np.ascontiguousarray(inputs.c0[layer].transpose(state_axes),
                                                        dtype=np_dtype)
    return out


def read_outputs(case: Case, got: dict[str, np.ndarray], *, layout: int = 0) -> Outputs:
    """Harness outputs (float64) from the graph's outputs by name, laid out as ``layout`` says:
    each layer's Y -> [N, T, D*H] (the direction axis becomes features), the states -> [D, N, H]
    concatenated over layers (:func:`harness.families.onnx.read_graph_outputs`, which a
    reproducer runs too)."""
    axes = DATA_AXES[layout]
    y_layers, h_n, c_n = read_graph_outputs(got, axes.y, axes.state, case.batch, case.seq_len,
                                            case.num_layers, case.cell_kind.has_cell_state)
    return Outputs(y=y_layers[-1], h_n=h_n, c_n=c_n, y_layers=y_layers)


def handed(model, feed: dict[str, np.ndarray], *, runtime: str, layout: int,
           model_bytes: bytes | None = None, **call) -> Handed:
    """What a runtime of this graph is handed: ``model.onnx`` (``model_bytes``, by default the
    model serialized), the feeds as given, and the axis orders to read its outputs back in
    (``call``: the runtime's own settings, e.g. OpenVINO's compile config)."""
    elem = model.graph.input[0].type.tensor_type.elem_type
    from onnx import helper

    axes = DATA_AXES[layout]
    return Handed("onnx", {"framework": runtime, "runtime": runtime, "layout": layout,
                           "dtype": np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name,
                           "y_axes": axes.y, "state_axes": axes.state,
                           "inputs": [i.name for i in model.graph.input],
                           "outputs": [o.name for o in model.graph.output], **call},
                  arrays={f"feed/{k}": np.asarray(v) for k, v in feed.items()},
                  files={"model.onnx": model_bytes if model_bytes is not None
                         else model.SerializeToString()})
