"""An ONNX LSTM/GRU node as ``compare`` runs it (:class:`OnnxNode`, made by :func:`node_of`
from what the ONNX layer finder found): the node cut out of the model (:func:`cut_out`) or,
where the model's main graph is that one node fed by graph inputs (``sole``), the file itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.readers.onnx_layers import INPUTS, OnnxLayer
from harness.spec import Case

# the numpy type of each ONNX element type a recurrent node's weights may hold
NUMPY_OF = {"FLOAT": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16}


@dataclass(frozen=True)
class OnnxNode:
    """What is needed to run one LSTM/GRU node as the model holds it: its ``op_type``,
    ``name``, ``attributes`` as recorded, its folded ``weights`` (``W``, ``R``, ``B``, ``P``)
    in the element type the node reads them in (``elem``: ``FLOAT``...), the names of its
    inputs and outputs, whether it is in the main graph (``main``), and the model's bytes
    (``model``: the user's file, run as it is where it is this one node, or run up to the node
    for ``--inputs``)."""

    op_type: str
    name: str
    path: str
    where: str
    attributes: dict
    weights: dict[str, np.ndarray] = field(repr=False)
    elem: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    main: bool
    sole: bool  # the model's main graph is this node alone, fed by graph inputs
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    model: bytes = field(repr=False, default=b"")


def node_of(n: OnnxLayer, native: dict[str, np.ndarray], data: bytes) -> OnnxNode:
    elem = n.dtypes.get("W", "FLOAT")
    np_type = NUMPY_OF.get(elem, np.float32)
    weights = {k: np.asarray(v, dtype=np_type) for k, v in native.items()}
    fed = n.graph_inputs() if n.in_main_graph else []
    inputs = tuple(n.node_inputs)
    data_inputs = [inputs[k] for k in (0, 4, 5, 6) if k < len(inputs) and inputs[k]]
    outs: list[str] = []
    sole = n.in_main_graph and n.graph_nodes == 1 and all(i in fed for i in data_inputs)
    if sole:  # one node: its graph's outputs (not in the reader's outline) are cheap to read
        import onnx

        outs = [o.name for o in onnx.load_model_from_string(data).graph.output]
        sole = bool(n.node_outputs) and n.node_outputs[0] in outs
    return OnnxNode(n.op_type, n.name, n.path, n.where, dict(n.attributes), weights, elem,
                    inputs, tuple(n.node_outputs), n.in_main_graph, sole, tuple(fed),
                    tuple(outs), data)


# the graph's names in the cut-out model: those the onnxruntime adapter's graph uses, so that
# its feeds and outputs are read by harness/frameworks/onnx.py
CUT_INPUTS = {"X": "X", "sequence_lens": "sequence_lens", "initial_h": "initial_h0",
              "initial_c": "initial_c0"}
CUT_OUTPUTS = ("Y0", "Y_h0", "Y_c0")


def cut_out(node: OnnxNode, case: Case, *, lengths: bool):
    """A one-node ONNX model (ModelProto) of ``node``: its op type, name and attributes as
    recorded, its folded weights as initializers in the type it reads them in; ``X`` and the
    initial states (and ``sequence_lens`` where ``lengths``) are graph inputs, named as the
    harness's own graph names them (:mod:`harness.frameworks.onnx`), ``Y0``, ``Y_h0`` (and
    ``Y_c0``) its outputs."""
    from onnx import TensorProto, helper, numpy_helper

    from harness.frameworks.onnx import IR_VERSION, OPSET

    elem = getattr(TensorProto, node.elem)
    lstm = node.op_type == "LSTM"
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    if not lstm:
        names = names[:6]
    node_in = []
    for name in names:
        if name in node.weights:
            node_in.append(name)
        elif name in CUT_INPUTS and (name != "sequence_lens" or lengths):
            node_in.append(CUT_INPUTS[name])
        else:
            node_in.append("")
    while node_in and not node_in[-1]:
        node_in.pop()
    outputs = list(CUT_OUTPUTS[:3 if lstm else 2])
    # ranks known, steps and batch free (OpenVINO's CPU plugin refuses a dynamic rank)
    D, H = case.num_directions, case.hidden_size
    shapes = {"X": ["steps", "batch", case.input_size], "sequence_lens": ["batch"],
              "initial_h0": [D, "batch", H], "initial_c0": [D, "batch", H],
              "Y0": ["steps", D, "batch", H], "Y_h0": [D, "batch", H], "Y_c0": [D, "batch", H]}
    one = helper.make_node(node.op_type, node_in, outputs, name=node.name or node.op_type,
                           **node.attributes)
    graph_in = [helper.make_tensor_value_info("X", elem, shapes["X"])]
    if lengths:
        graph_in.append(helper.make_tensor_value_info("sequence_lens", TensorProto.INT32,
                                                      shapes["sequence_lens"]))
    graph_in += [helper.make_tensor_value_info(CUT_INPUTS[s], elem, shapes[CUT_INPUTS[s]])
                 for s in (("initial_h", "initial_c") if lstm else ("initial_h",))]
    graph = helper.make_graph(
        [one], "rnn-harness-cut-out", graph_in,
        [helper.make_tensor_value_info(o, elem, shapes[o]) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in node.weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION, producer_name="rnn-harness compare")


def node_input(node: OnnxNode, tensor: str) -> str | None:
    k = INPUTS.index(tensor)
    return node.inputs[k] if k < len(node.inputs) and node.inputs[k] else None
