"""The shipped ONNX node run as the user's file holds it, in ONNX Runtime and in OpenVINO, for
the shipped-outputs judge (:mod:`harness.models.judges.shipped`, through :mod:`.shipped_run`), and
the node's real inputs for ``--inputs``.

- A model whose main graph is the one LSTM/GRU node, fed by graph inputs, runs as the file
  itself (its bytes, its names).
- A node inside a larger model (in a branch, a loop body, after other operators) is cut out
  (:func:`harness.models.onnx_nodes.cut_out`): a one-node model with the node's own op type,
  name and attributes as recorded and its folded weights in the type it reads them in, never
  rebuilt from canonical weights.

:class:`ShippedNode` is an adapter (so that the run's own pair path judges it, with its
tolerance, noise floor and rows) that ignores the weights it is handed: it runs the node.
"""

from __future__ import annotations

import io

import numpy as np

from harness.adapters.base import Adapter, Capabilities
from harness.data import Inputs, Outputs
from harness.errors import HarnessError, Unavailable
from harness.frameworks.onnx import feeds, read_outputs
from harness.models.onnx_nodes import NUMPY_OF, OnnxNode, cut_out
from harness.spec import Case

RUNTIMES = ("onnxruntime", "openvino")


def _capabilities(runtime: str) -> Capabilities:
    from harness.adapters.onnxruntime import OnnxRuntime
    from harness.adapters.openvino import CAPABILITIES

    caps = OnnxRuntime.capabilities if runtime == "onnxruntime" else CAPABILITIES
    return caps


class ShippedNode(Adapter):
    """One ONNX LSTM/GRU node of a shipped model run by ``runtime`` (onnxruntime, openvino)."""

    framework = "onnx"
    layout_name = None
    saved_models = (".onnx",)

    def __init__(self, node: OnnxNode, runtime: str) -> None:
        self.node, self.runtime = node, runtime
        self.name = runtime
        self.title = f"the shipped {node.op_type} node in {runtime}"
        self.requires = ("onnx", runtime)
        self.capabilities = _capabilities(runtime)

    def check_available(self) -> None:
        if self.runtime == "onnxruntime":
            from harness.frameworks.onnx import import_onnxruntime

            import_onnxruntime()
        else:
            from harness.frameworks.openvino import import_openvino

            import_openvino()

    def route_note(self, case: Case) -> str | None:
        return ("ran the shipped file itself" if self.node.sole else
                "ran the shipped node cut out of the model (a one-node model with its own "
                "attributes and folded weights)")

    def model_and_feeds(self, case: Case, inputs: Inputs) -> tuple[bytes, dict[str, np.ndarray],
                                                                     dict[str, str]]:
        """The model's bytes, its feeds, and its output names -> the harness graph's names
        (``Y0``, ``Y_h0``, ``Y_c0``)."""
        node = self.node
        dtype = NUMPY_OF.get(node.elem, np.float32)
        given = feeds(case, inputs, dtype=dtype)
        if not node.sole:
            model = cut_out(node, case, lengths=inputs.seq_lengths is not None)
            outs = {o.name: o.name for o in model.graph.output}
            return model.SerializeToString(), given, outs
        ours = {0: "X", 4: "sequence_lens", 5: "initial_h0", 6: "initial_c0"}
        feed = {}
        for k, harness_name in ours.items():
            name = node.inputs[k] if k < len(node.inputs) else ""
            if not name or name not in node.graph_inputs:
                continue
            if harness_name == "sequence_lens":
                feed[name] = np.asarray(inputs.lengths, dtype=np.int32)
            else:
                feed[name] = given[harness_name]
        outs = {name: theirs for name, theirs in zip(node.outputs, ("Y0", "Y_h0", "Y_c0"),
                                                     strict=False)
                if name and name in node.graph_outputs}
        return node.model, feed, outs

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        if self.node.elem not in NUMPY_OF:
            raise Unavailable(f"the node reads {self.node.elem} values; not run here")
        model, feed, outs = self.model_and_feeds(case, inputs)
        got = run_model(self.runtime, model, feed, list(outs))
        named = {outs[k]: v for k, v in got.items()}
        absent = {}
        lstm = case.cell_kind.has_cell_state
        for theirs, ours in (("Y_h0", "h_n"), ("Y_c0", "c_n")):
            if theirs not in named and (lstm or ours == "h_n"):
                absent[ours] = "the shipped model does not output it"
                named[theirs] = np.zeros((case.num_directions, case.batch, case.hidden_size))
        out = read_outputs(case, named)
        for ours in absent:
            setattr(out, ours, None)
        out.absent = absent
        out.models = {".onnx": model}
        return out


def run_model(runtime: str, model: bytes, feed: dict[str, np.ndarray], outputs: list[str]
              ) -> dict[str, np.ndarray]:
    """``outputs`` of the ONNX model ``model`` on ``feed``, in ONNX Runtime (CPU) or OpenVINO
    (CPU, f32 inference precision)."""
    if runtime == "onnxruntime":
        from harness.frameworks.onnx import import_onnxruntime

        _, ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return dict(zip(outputs, sess.run(outputs, feed), strict=True))
    from harness.adapters.openvino import COMPILE_CONFIG
    from harness.frameworks.openvino import core, onnx_frontend

    frontend = onnx_frontend()
    converted = frontend.convert(frontend.load(io.BytesIO(model)))
    # the CPU plugin refuses inputs of unknown rank (a file that declares no shapes): give
    # each the shape of what it is fed
    converted.reshape({p.get_any_name(): list(feed[p.get_any_name()].shape)
                       for p in converted.inputs if p.get_any_name() in feed})
    compiled = core().compile_model(converted, "CPU", COMPILE_CONFIG)
    result = compiled(feed)
    got = {}
    for port, value in result.items():
        for name in port.get_names():
            got[name] = value
    return {k: got[k] for k in outputs}


# --inputs: what the node reads when the model runs on the user's data ------------------------

def node_inputs(node: OnnxNode, data: np.ndarray | dict[str, np.ndarray], case: Case
                ) -> Inputs:
    """Run the shipped model on ``data`` in ONNX Runtime with the node's data inputs (``X``,
    its initial states and lengths where the model computes them) exposed as graph outputs,
    and return them as harness inputs. ``data``: one array for a model with one fed input, or
    arrays by input name."""
    import onnx
    from onnx import helper

    fed = list(node.graph_inputs)
    if isinstance(data, dict):
        feed = dict(data)
        missing = [n for n in fed if n not in feed]
        extra = [n for n in feed if n not in fed]
        if missing or extra:
            raise HarnessError(f"the arrays are named {sorted(feed)[:8]}; the shipped model's "
                               f"inputs are {fed[:8]}", field="--inputs")
    else:
        if len(fed) != 1:
            raise HarnessError(f"one array given; the shipped model has {len(fed)} inputs "
                               f"({', '.join(repr(n) for n in fed[:8])}): give an .npz with an "
                               "array per input name", field="--inputs")
        feed = {fed[0]: data}
    model = onnx.load_from_string(node.model)
    for v in model.graph.input:
        if v.name in feed:
            elem = v.type.tensor_type.elem_type
            feed[v.name] = np.asarray(feed[v.name],
                                      dtype=helper.tensor_dtype_to_np_dtype(elem))
    wanted = {k: node.inputs[k] for k in (0, 4, 5, 6)
              if k < len(node.inputs) and node.inputs[k]}
    present = {o.name for o in model.graph.output}
    elem = getattr(onnx.TensorProto, node.elem)
    for k, name in wanted.items():
        if name not in present:
            model.graph.output.append(helper.make_tensor_value_info(
                name, onnx.TensorProto.INT32 if k == 4 else elem, None))
    try:
        got = run_model("onnxruntime", model.SerializeToString(), feed, list(wanted.values()))
    except Exception as exc:  # the runtime's own words on data that does not fit the model
        raise HarnessError(f"the shipped model does not run on the data: "
                           f"{(str(exc).splitlines() or [''])[0][:300]}",
                           field="--inputs") from None
    x = np.asarray(got[wanted[0]], dtype=np.float64)
    if x.ndim != 3 or x.shape[2] != case.input_size:
        raise HarnessError(f"the node's X is shaped {list(x.shape)}; expected [steps, batch, "
                           f"{case.input_size}]", field="--inputs")
    x = x.transpose(1, 0, 2)  # layout 0: [T, N, I]
    D, B, H = case.num_directions, x.shape[0], case.hidden_size

    def state(k: int) -> np.ndarray:
        if k in wanted:
            return np.asarray(got[wanted[k]], dtype=np.float64).reshape(D, B, H)
        return np.zeros((D, B, H))

    lengths = (np.asarray(got[wanted[4]], dtype=np.int64).reshape(B) if 4 in wanted else None)
    c0 = state(6) if case.cell_kind.has_cell_state else None
    return Inputs(x=x, h0=state(5), c0=c0, seq_lengths=lengths)
