"""Every recurrent layer of an ONNX model: its LSTM and GRU nodes wherever they are, with their
weights folded from constants.

:func:`recurrent_layers` walks the main graph and, depth first in graph order, the subgraphs
of its nodes (``If`` branches, ``Loop`` and ``Scan`` bodies, any graph attribute), nested at
most :data:`~harness.readers.onnx_proto.MAX_NESTING` deep. Each LSTM or GRU node of the ONNX
operator set is an :class:`OnnxLayer` with a path naming where it is:
``main/If_3:then_branch/LSTM_0`` is the node ``LSTM_0`` in the ``then_branch`` of the node
``If_3`` of the main graph (a leading ``/`` of a node's name, as torch's exporter writes them,
is left out of the path; an unnamed node is ``OP#k``, its index in its graph).

Its ``W``, ``R``, ``B`` and ``P`` are followed through constant-only chains
(:mod:`harness.readers.onnx_fold`): initializers and ``Constant`` nodes of its graph and of the
graphs around it, through Identity, Cast, Slice, Split, Concat, Unsqueeze, Squeeze, Reshape,
Transpose and Gather, as torch's TorchScript exporter leaves an ``nn.LSTMCell`` in a branch.
Listing is cheap: shapes are folded symbolically (the input size comes from ``W``'s), values
only when :meth:`OnnxLayer.arrays` asks. A weight that depends on a graph input or on another
operator's output is named as such (:attr:`OnnxLayer.problem`, and the error
:meth:`OnnxLayer.arrays` raises).

The model may come from a stranger: it is never ``onnx.load``-ed, external data is refused,
the structure, nesting and entries are bounded (:mod:`harness.readers.onnx_proto`), and folds
are bounded in depth, nodes and bytes before anything is computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.errors import WeightsError
from harness.readers.onnx_fold import Folder, Scope
from harness.readers.onnx_fold_types import FLOATS, FoldError, Meta, NotConstant, dtype_name
from harness.readers.onnx_proto import ONNX_DOMAINS, OnnxFile, attribute_value, subgraphs

RECURRENT = ("LSTM", "GRU")
GATES = {"LSTM": 4, "GRU": 3}
# the node's inputs by position: W, R, B, sequence_lens, initial_h, initial_c (LSTM), P (LSTM)
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
WEIGHTS = ("W", "R", "B", "P")
_BRANCHES = {"then_branch": "then-branch", "else_branch": "else-branch", "body": "body"}


@dataclass
class OnnxLayer:
    """One LSTM or GRU node of an ONNX model.

    - ``path``: where it is (``main/If_3:then_branch/LSTM_0``); ``where``: the same in words
      (``LSTM node 'LSTM_0' in the then-branch of 'If_3'``);
    - ``op_type``, ``direction`` (``forward``, ``reverse``, ``bidirectional``), ``hidden_size``,
      ``input_size`` (from the folded ``W``'s shape; None where ``W`` is not a constant);
    - ``attributes``: the node's attributes (``hidden_size``, ``clip``, ``activations``...);
    - ``dtypes``: the stored ONNX element type of each constant weight (``FLOAT16``...);
    - ``problem``: why its weights cannot be read (a weight that is not a constant), or None.
    """

    path: str
    name: str
    op_type: str
    direction: str
    hidden_size: int
    input_size: int | None
    attributes: dict
    where: str
    dtypes: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    _finder: _Finder | None = field(default=None, repr=False, compare=False)
    _scope: Scope | None = field(default=None, repr=False, compare=False)
    _node: object = field(default=None, repr=False, compare=False)

    @property
    def num_directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1

    def input_name(self, tensor: str) -> str | None:
        """The name the node reads ``tensor`` (``W``, ``initial_h``...) from; None if left
        out."""
        k = INPUTS.index(tensor)
        inputs = self._node.input
        return inputs[k] if k < len(inputs) and inputs[k] else None

    @property
    def in_main_graph(self) -> bool:
        """Whether the node is in the model's main graph (not in an If/Loop/Scan body)."""
        return self._scope.parent is None

    @property
    def graph_nodes(self) -> int:
        """How many nodes the graph holding the node has."""
        return len(self._scope.graph.node)

    @property
    def node_inputs(self) -> list[str]:
        return list(self._node.input)

    @property
    def node_outputs(self) -> list[str]:
        return list(self._node.output)

    def graph_inputs(self) -> list[str]:
        """The names of its graph's inputs that are fed (not initializers)."""
        graph = self._scope.graph
        inits = {t.name for t in graph.initializer}
        return [v.name for v in graph.input if v.name not in inits]

    def arrays(self, names: tuple[str, ...] = WEIGHTS) -> dict[str, np.ndarray]:
        """The folded ``W``, ``R``, ``B``, ``P`` the node has (a left-out ``B`` or ``P`` is
        absent: zeros, as the operator defines), as float64; computed now, under the memory
        limit."""
        if self.problem is not None:
            raise WeightsError(self.problem, file=self._finder.file.path)
        return {n: self.array(n) for n in names if self.input_name(n) is not None}

    def array(self, tensor: str, *, integer: bool = False) -> np.ndarray | None:
        """One input of the node folded (float64), None where it is left out; a weight or a
        constant ``sequence_lens`` (``integer``) or initial state. Raises
        :class:`~harness.readers.onnx_fold_types.NotConstant` for an input that is not a constant
        and is not a weight (a state fed at run time)."""
        name = self.input_name(tensor)
        if name is None:
            return None
        try:
            self._finder.meta(self, tensor, name, integer=integer)
        except NotConstant as exc:
            if tensor in WEIGHTS:
                raise WeightsError(f"{self.where}: its {tensor} {exc}",
                                   file=self._finder.file.path) from None
            raise
        try:
            values = self._finder.folder.value(self._scope, name)
        except FoldError as exc:
            raise WeightsError(f"{self.where}: its {tensor} {exc}",
                               file=self._finder.file.path) from None
        return values.astype(np.float64)


def recurrent_layers(path: str | Path, max_bytes: int | None = None) -> list[OnnxLayer]:
    """Every LSTM and GRU node of the ONNX model ``path``, in graph order (a subgraph's at its
    holding node's place), with its sizes; the weights are folded when asked
    (:meth:`OnnxLayer.arrays`). ``max_bytes``: the memory limit (tensors and folds beyond it
    are refused before they are read or computed). An LSTM or GRU of another domain than
    ONNX's is refused: what it computes is that domain's."""
    path = Path(path)
    finder = _Finder(OnnxFile(path, max_bytes), max_bytes)
    return finder.layers()


class _Finder:
    def __init__(self, file: OnnxFile, max_bytes: int | None) -> None:
        self.file = file
        self.folder = Folder(file.opset, max_bytes)

    def fail(self, text: str) -> WeightsError:
        return WeightsError(text, file=self.file.path)

    def layers(self) -> list[OnnxLayer]:
        found: list[OnnxLayer] = []
        self._walk(Scope(self.file.graph, None, "the main graph", "main"), found)
        return found

    def _walk(self, scope: Scope, found: list[OnnxLayer]) -> None:
        # nesting is bounded by onnx_proto.check_structure: recursion stays shallow
        for k, node in enumerate(scope.graph.node):
            label = _component(node, k)
            if node.op_type in RECURRENT:
                if node.domain not in ONNX_DOMAINS:
                    raise self.fail(f"node {node.name[:60]!r} is an {node.op_type} of the domain "
                                    f"{node.domain[:60]!r}, not the ONNX operator (domain '' or "
                                    "'ai.onnx'): what it computes is that domain's")
                found.append(self._layer(scope, node, f"{scope.path}/{label}"))
            for attribute, graph in subgraphs(node):
                base = attribute.split("[")[0]
                words = _BRANCHES.get(base, f"attribute {base!r}") + attribute[len(base):]
                where = f"the {words} of {node.name[:60]!r}" + (
                    f" in {scope.where}" if scope.parent is not None else "")
                self._walk(Scope(graph, scope, where, f"{scope.path}/{label}:{attribute}"),
                           found)

    def _layer(self, scope: Scope, node, path: str) -> OnnxLayer:
        where = f"{node.op_type} node {node.name[:60]!r}" + (
            f" in {scope.where}" if scope.parent is not None else "")
        attrs = {}
        for a in node.attribute:
            if a.HasField("g") or len(a.graphs):
                raise self.fail(f"{where} has a graph attribute {a.name[:60]!r}")
            try:
                attrs[a.name] = attribute_value(a, where)
            except ValueError as exc:
                raise self.fail(str(exc)) from None
        direction = direction_of(self.file.path, node.name, attrs)
        layer = OnnxLayer(path=path, name=node.name, op_type=node.op_type, direction=direction,
                          hidden_size=0, input_size=None, attributes=attrs, where=where,
                          _finder=self, _scope=scope, _node=node)
        if layer.input_name("W") is None or layer.input_name("R") is None:
            raise self.fail(f"{where} has no W and R inputs: cannot tell the sizes")
        metas: dict[str, Meta] = {}
        for tensor in WEIGHTS:
            name = layer.input_name(tensor)
            if name is None:
                continue
            try:
                meta = self.meta(layer, tensor, name)
            except NotConstant as exc:
                layer.problem = f"{where}: its {tensor} {exc}"
                break
            metas[tensor] = meta
            layer.dtypes[tensor] = dtype_name(meta.code)
        hidden = attrs.get("hidden_size")
        if hidden is None:
            raise self.fail(f"{where} has no hidden_size attribute: cannot tell the sizes")
        if not isinstance(hidden, int) or hidden < 1:
            raise self.fail(f"{where} has hidden_size={hidden!r}; expected a positive integer")
        layer.hidden_size = hidden
        if "W" in metas:
            dims = list(metas["W"].shape)
            if len(dims) != 3 or dims[2] < 1:
                raise self.fail(f"{where}: its W has dims {dims[:8]}; expected [directions, "
                                "gates x hidden_size, input_size]")
            layer.input_size = dims[2]
        return layer

    def meta(self, layer: OnnxLayer, tensor: str, name: str, *, integer: bool = False
             ) -> Meta:
        """The folded Meta of the node's input ``tensor``; a weight or lengths of a type the
        harness cannot read are refused. NotConstant passes for the caller to judge."""
        try:
            meta = self.folder.meta(layer._scope, name)
        except FoldError as exc:
            raise self.fail(f"{layer.where}: its {tensor} {exc}") from None
        if integer and meta.code not in (6, 7):
            raise self.fail(f"{layer.where}: its {tensor} ({name[:60]!r}) holds "
                            f"{dtype_name(meta.code)} values; expected int32 or int64")
        if not integer and meta.code not in FLOATS:
            raise self.fail(f"{layer.where}: its {tensor} ({name[:60]!r}) holds "
                            f"{dtype_name(meta.code)} values; expected float, double, float16 "
                            "or bfloat16")
        return meta


def _component(node, index: int) -> str:
    name = node.name[1:] if node.name.startswith("/") else node.name
    return name or f"{node.op_type}#{index}"


def direction_of(path: Path, node: str, attrs: dict) -> str:
    """A recurrent node's ``direction`` attribute (forward where it has none), checked."""
    direction = attrs.get("direction", b"forward")
    direction = direction.decode("utf-8", "replace") if isinstance(direction, bytes) else direction
    if direction not in ("forward", "reverse", "bidirectional"):
        raise WeightsError(f"node {node!r} has direction={str(direction)[:40]!r}; expected "
                           "forward, reverse or bidirectional", file=path)
    return direction
