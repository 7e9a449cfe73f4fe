"""ONNX models (``.onnx``, layout ``onnx``): the ``W``, ``R``, ``B``, ``P`` of the model's
LSTM/GRU nodes, checked against the case (a missing ``B`` or ``P`` is zeros, as the operator
defines: the layout's optional tensors, applied by ``Layout.from_native``).

What is found (:mod:`harness.readers.onnx_layers`):

- LSTM and GRU nodes anywhere: the main graph and the subgraphs of ``If``, ``Loop`` and
  ``Scan`` (nested at most 32 deep), in graph order, each with a path
  (``main/If_3:then_branch/LSTM_0``); ``select`` names nodes by name or by path;
- their weights as initializers or ``Constant`` nodes of their graph or of a graph around it,
  or folded from such constants through Identity, Cast, Slice, Split, Concat, Unsqueeze,
  Squeeze, Reshape, Transpose and Gather (:mod:`harness.readers.onnx_fold`, with the
  semantics of the model's opset), as torch's TorchScript exporter leaves an ``nn.LSTMCell``;
  float, double, float16 and bfloat16;
- a weight that depends on a graph input or another operator is refused, naming it.

The model may come from a stranger, so it is never ``onnx.load``-ed (which builds every
tensor's data): its structure is checked from the encoding, it is parsed into an outline
without the tensors' data (:mod:`harness.readers.onnx_proto`), and only the tensors the
recurrent nodes use are decoded, after their types and sizes, folded ones included, are
checked against the memory limit. External data (in another file) is refused, never read.
Nodes are the ONNX operators only (domain ``""`` or ``ai.onnx``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.cells import cell_named
from harness.errors import WeightsError
from harness.readers.onnx_fold_types import NotConstant
from harness.readers.onnx_layers import OnnxLayer, direction_of, recurrent_layers
from harness.spec import Case

SUFFIXES = (".onnx",)

# ONNX HardSigmoid(x) = max(0, min(1, alpha x + beta)): (alpha, beta) of each hard sigmoid case
_HARD_SIGMOIDS = {"hard_sigmoid_tf_keras": (0.2, 0.5), "hard_sigmoid_keras3": (1 / 6, 0.5)}


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The nodes' tensors (:func:`read_onnx`); a layout other than ``onnx`` is refused."""
    if layout != "onnx":
        raise WeightsError(f"an ONNX model holds `onnx` tensors, not {layout!r}; use "
                           "--from onnx", file=path)
    return read_onnx(path, case, select=select, max_bytes=max_bytes)


def _selected(layers: list[OnnxLayer], select: str | None) -> list[OnnxLayer]:
    """The layers ``select`` names (comma-separated node names or paths), in graph order."""
    if select is None:
        return layers
    wanted = {s.strip() for s in select.split(",")}
    return [layer for layer in layers if layer.name in wanted or layer.path in wanted]


def _one_graph(path: Path, layers: list[OnnxLayer]) -> None:
    """Refuse nodes of different graphs as one stack (an If's two branches are
    alternatives, not layers)."""
    graphs = {n.path.rpartition("/")[0] for n in layers}
    if len(graphs) > 1:
        raise WeightsError(f"the model has {len(layers)} {layers[0].op_type} nodes in "
                           f"{len(graphs)} graphs ({', '.join(n.path for n in layers[:8])}): "
                           "choose one with --select (a name or a path)", file=path)


def read_onnx(path: Path, case: Case, *, select: str | None = None,
              max_bytes: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """``W``, ``R``, ``B``, ``P`` of the model's LSTM/GRU nodes (graph order = layer order,
    a subgraph's nodes at the place of the node holding it).

    ``max_bytes``: the memory limit; a used tensor declaring more, or a fold needing more, is
    refused before it is parsed or computed."""
    op = case.cell.upper()
    layers = _selected([n for n in recurrent_layers(path, max_bytes) if n.op_type == op],
                       select)
    if not layers:
        raise WeightsError(f"no {op} node" + (f" named {select!r}" if select else "") +
                           " in the model", file=path)
    if len(layers) != case.num_layers:
        raise WeightsError(f"the model has {len(layers)} {op} node(s) ("
                           f"{', '.join(n.path for n in layers[:8])}), the case has "
                           f"{case.num_layers} layer(s); choose nodes with --select (names or "
                           "paths)", file=path)
    _one_graph(path, layers)
    native, notes = {}, []
    for k, layer in enumerate(layers):
        _check_onnx_attrs(path, layer.name, layer.attributes, case)
        if layer.problem is not None:
            raise WeightsError(layer.problem, file=path)
        name = (lambda n: n) if case.num_layers == 1 else (lambda n, k=k: f"layer{k}/{n}")
        # Optional inputs left out take the operator's defaults (Layout.from_native: B and P
        # zeros); constant lengths or states are read so that from_native can check them.
        for tname in ("W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"):
            if layer.input_name(tname) is None:
                if tname in ("B", "P") and (tname == "B" or case.peepholes):
                    notes.append(f"node {layer.name!r} has no {tname}: zeros, as the operator "
                                 "defines")
                continue
            try:
                value = layer.array(tname, integer=tname == "sequence_lens")
            except NotConstant:
                continue  # lengths and states fed at run time: the inputs file's business
            key = "sequence_lens" if tname == "sequence_lens" else name(tname)
            native[key] = value
        notes.append(f"read {op} node {layer.path}")
    return native, notes


def _check_onnx_attrs(path: Path, node: str, attrs: dict, case: Case) -> None:
    def say(attr: str, got: object, want: object) -> None:
        raise WeightsError(f"node {node!r} has {attr}={got!r}, the case says {want!r}", file=path)

    direction = direction_of(path, node, attrs)
    if direction != case.dir_mode:
        say("direction", direction, case.dir_mode)
    if attrs.get("hidden_size", case.hidden_size) != case.hidden_size:
        say("hidden_size", attrs["hidden_size"], case.hidden_size)
    if attrs.get("layout", 0) != 0:
        say("layout", attrs["layout"], 0)
    if (case.cell_kind.reads("reset_after")
            and attrs.get("linear_before_reset", 0) != int(case.reset_after)):
        say("linear_before_reset", attrs.get("linear_before_reset", 0), int(case.reset_after))
    if (case.cell_kind.reads("input_forget")
            and attrs.get("input_forget", 0) != int(case.input_forget)):
        say("input_forget", attrs.get("input_forget", 0), int(case.input_forget))
    clip = attrs.get("clip")
    if (clip is None) != (case.gate_clip is None) or (clip is not None and
                                                      abs(clip - case.gate_clip) > 1e-6):
        say("clip", clip, case.gate_clip)
    activation = _gate_activation(path, node, attrs, case.cell, case.num_directions)
    if activation != case.recurrent_activation:
        say("activations", attrs.get("activations"), case.recurrent_activation)


def _gate_activation(path: Path, node: str, attrs: dict, cell: str, directions: int) -> str:
    """The case's ``recurrent_activation`` the node's ``activations`` (and ``activation_alpha``
    and ``_beta``) spell: per direction Sigmoid or HardSigmoid for the gates, then Tanh for the
    candidate (and, with a cell state, the output); anything else is refused."""
    acts = [a.decode("utf-8", "replace") if isinstance(a, bytes) else str(a)
            for a in attrs.get("activations", [])]
    if not acts:
        return "sigmoid"
    per = 3 if cell_named(cell).has_cell_state else 2  # f, g (and h)
    shape = f"{per} per direction: the gates', then Tanh" + (" twice" if per == 3 else "")
    if len(acts) != per * directions:
        raise WeightsError(f"node {node!r} has {len(acts)} activations {acts[:8]}; expected "
                           f"{per * directions} ({shape})", file=path)
    gates = set(acts[::per])
    if len(gates) != 1 or not gates <= {"Sigmoid", "HardSigmoid"} or any(
            a != "Tanh" for k, a in enumerate(acts) if k % per):
        raise WeightsError(f"node {node!r} has activations {acts}; the harness reads Sigmoid "
                           f"or HardSigmoid gates with Tanh ({shape})", file=path)
    if acts[0] == "Sigmoid":
        return "sigmoid"
    alphas = set(attrs.get("activation_alpha") or [0.2])  # the operator's defaults
    betas = set(attrs.get("activation_beta") or [0.5])
    for name, (alpha, beta) in _HARD_SIGMOIDS.items():
        if all(abs(a - alpha) < 1e-6 for a in alphas) and all(abs(b - beta) < 1e-6
                                                              for b in betas):
            return name
    raise WeightsError(f"node {node!r} has HardSigmoid alpha {sorted(alphas)} and beta "
                       f"{sorted(betas)}; the harness reads alpha 0.2 (tf_keras) or 1/6 "
                       "(Keras 3) with beta 0.5", file=path)


def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """The case fields of the first LSTM/GRU node (the stack's depth from their number): its
    attributes (hidden_size, direction, clip, input_forget, linear_before_reset, HardSigmoid
    activations) and its ``W``/``P`` inputs, folded symbolically (no values computed)."""
    layers = _selected(recurrent_layers(path, max_bytes), select)
    if not layers:
        raise WeightsError("no LSTM or GRU node" + (f" named {select!r}" if select else "")
                           + " in the model", file=path)
    if len({n.op_type for n in layers}) > 1:
        raise WeightsError("the model has both LSTM and GRU nodes; choose with --select",
                           file=path)
    _one_graph(path, layers)
    first = layers[0]
    fields = fields_of(path, first)
    fields["num_layers"] = len(layers)
    notes = [] if first.path == f"main/{first.name}" else [f"read {first.op_type} node "
                                                          f"{first.path}"]
    return fields, "onnx", notes


def fields_of(path: Path, layer: OnnxLayer) -> dict:
    """The case fields of one LSTM/GRU node (one layer): its attributes (hidden_size,
    direction, clip, input_forget, linear_before_reset, HardSigmoid activations) and its
    ``W``/``P`` inputs, folded symbolically. A node whose weights are not constants is refused
    with :attr:`OnnxLayer.problem`."""
    if layer.problem is not None:
        raise WeightsError(layer.problem, file=path)
    attrs, cell = layer.attributes, layer.op_type.lower()
    fields: dict = {"cell": cell, "input_size": layer.input_size,
                    "hidden_size": layer.hidden_size, "num_layers": 1,
                    "direction": layer.direction}
    if attrs.get("clip") is not None:
        fields["gate_clip"] = float(attrs["clip"])
    if cell_named(cell).reads("input_forget"):
        fields["input_forget"] = bool(attrs.get("input_forget", 0))
        fields["peepholes"] = layer.input_name("P") is not None
    else:
        fields["reset_after"] = bool(attrs.get("linear_before_reset", 0))
    activation = _gate_activation(path, layer.name, attrs, cell, layer.num_directions)
    if activation != "sigmoid":
        fields["recurrent_activation"] = activation
    return fields


def native_of(path: Path, layer: OnnxLayer, case: Case) -> dict[str, np.ndarray]:
    """One node's ``W``, ``R``, ``B``, ``P`` (float64, folded) for a one-layer ``case``, its
    attributes checked against the case; a left-out ``B`` or ``P`` is absent (zeros, as the
    operator defines: ``Layout.from_native``)."""
    _check_onnx_attrs(path, layer.name, layer.attributes, case)
    return layer.arrays()
