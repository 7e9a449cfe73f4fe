"""Constant folding of the chains that feed an ONNX recurrent node its weights.

Exporters do not always store ``W``, ``R``, ``B`` as initializers: torch's TorchScript
exporter turns an ``nn.LSTMCell`` into an ``LSTM`` node whose weights are ``Slice``s of the
cell's tensors, reordered by ``Concat`` and lifted by ``Unsqueeze``, and inside an ``If`` branch
or a ``Loop`` body these chains are not folded at export. :class:`Folder` follows such a chain
by name through the graph and the graphs around it (a subgraph sees the names of its enclosing
graphs: lexical scope) and computes it in NumPy with ONNX's semantics, for these operators only:

    Constant, Identity, Cast, Slice, Split, Concat, Unsqueeze, Squeeze, Reshape, Transpose,
    Gather (constant indices)

Opset matters: Slice takes its starts and ends as attributes before opset 10, Split, Squeeze and
Unsqueeze their axes (or split) as attributes before 13 and as inputs from 13; Split takes
``num_outputs`` from 18; Reshape its shape as an attribute before 5. The model's ONNX opset
import decides.

The model may come from a stranger, so a chain is first followed symbolically (:meth:`meta`):
each tensor's dtype and shape, computed from the shapes and the small integer parameters
(starts, axes, shapes, indices, themselves folded the same way), each checked against the
memory limit and the tensors of the whole chain together too, before any data tensor is
decoded or computed (:meth:`value`). A chain deeper than :data:`MAX_CHAIN_DEPTH`, one of more
than :data:`MAX_CHAIN_NODES` nodes, a node of more than :data:`MAX_NODE_INPUTS` inputs, a rank
above :data:`~harness.readers.onnx_fold_types.MAX_RANK` or a cycle of names is refused. What the
chain reaches that is not a constant (a graph input, another operator's output, a name nothing
defines) raises :class:`NotConstant`; anything else wrong, :class:`FoldError`.

The operators are computed in :mod:`harness.readers.onnx_fold_ops`; the tensors' types, plans
and errors are :mod:`harness.readers.onnx_fold_types`.
"""

from __future__ import annotations

import numpy as np

from harness.readers.onnx_fold_ops import OPERATORS, Ctx
from harness.readers.onnx_fold_types import (
    DTYPES,
    Bad,
    FoldError,
    Meta,
    NotConstant,
    Plan,
    dtype_name,
    node_text,
    stored,
)
from harness.readers.onnx_proto import ONNX_DOMAINS

MAX_CHAIN_DEPTH = 100  # nodes from a weight back to a constant (torch's cell: 4)
MAX_CHAIN_NODES = 10_000  # nodes one fold visits, parameters included
MAX_NODE_INPUTS = 4096  # a Concat of the gate blocks has a handful
FOLDED = tuple(OPERATORS)


class Scope:
    """One graph and the graphs around it: a name is looked up here first, then outwards.
    ``where`` says in words where the graph is ("the then-branch of 'If_3'"), ``path`` in the
    finder's form (``main/If_3:then_branch``)."""

    def __init__(self, graph, parent: Scope | None, where: str, path: str) -> None:
        self.graph, self.parent, self.where, self.path = graph, parent, where, path
        self._defs: dict[str, list[tuple]] | None = None

    def defs(self) -> dict[str, list[tuple]]:
        if self._defs is None:
            defs: dict[str, list[tuple]] = {}
            for t in self.graph.initializer:
                defs.setdefault(t.name, []).append(("initializer", t))
            for s in self.graph.sparse_initializer:
                defs.setdefault(s.values.name, []).append(("sparse", s))
            for n in self.graph.node:
                for k, out in enumerate(n.output):
                    if out:
                        defs.setdefault(out, []).append(("node", n, k))
            for v in self.graph.input:
                # an input with an initializer of its name (IR < 4): the initializer is its
                # default; the weight is read as the model stores it
                if v.name not in defs:
                    defs[v.name] = [("input",)]
            self._defs = defs
        return self._defs

    def lookup(self, name: str) -> tuple[Scope, tuple] | None:
        scope: Scope | None = self
        while scope is not None:
            found = scope.defs().get(name)
            if found:
                if len(found) > 1:
                    raise FoldError(f"the model defines {name[:60]!r} {len(found)} times "
                                    f"{_in(scope)}(initializers or node outputs): which one "
                                    "counts is ambiguous")
                return scope, found[0]
            scope = scope.parent
        return None


def _in(scope: Scope) -> str:
    return "" if scope.parent is None else f"in {scope.where} "


class Folder:
    """Folds constant chains of one model (``opset``: its ONNX opset import, None where it has
    none) under ``max_bytes`` (None: no limit)."""

    def __init__(self, opset: int | None, max_bytes: int | None) -> None:
        self.opset, self.max_bytes = opset, max_bytes
        self._plans: dict[tuple[Scope, str], Plan] = {}
        self._visiting: set[tuple[Scope, str]] = set()
        self._visited = 0

    # the two phases ----------------------------------------------------------------------------

    def meta(self, scope: Scope, name: str) -> Meta:
        """The dtype and shape ``name`` folds to, every tensor of its chain checked against the
        memory limit; nothing but small integer parameters is decoded."""
        self._visited = 0
        return self.plan_tensor(scope, name, 0).meta

    def value(self, scope: Scope, name: str) -> np.ndarray:
        """``name`` folded: its chain planned (:meth:`meta`), the chain's tensors together
        checked against the memory limit, then computed."""
        self._visited = 0
        self.plan_tensor(scope, name, 0)
        return self.evaluate(scope, name)

    def evaluate(self, scope: Scope, name: str) -> np.ndarray:
        """``name`` computed, once planned: the chain's tensors together checked first."""
        chain = self._chain(scope, name)
        total = sum(self._plans[k].meta.nbytes for k in chain)
        if self.max_bytes is not None and total > self.max_bytes:
            raise FoldError(f"needs {total} bytes of tensors ({len(chain)} of them) to fold "
                            f"{name[:60]!r}, more than the memory limit of {self.max_bytes} "
                            "bytes")
        return self._compute(scope, name, {})

    # planning ----------------------------------------------------------------------------------

    def plan_tensor(self, scope: Scope, name: str, depth: int) -> Plan:
        """The plan of ``name`` in ``scope``, ``depth`` nodes down a chain (its own chain
        planned first; cached)."""
        found = scope.lookup(name)
        if found is None:
            raise NotConstant(f"names {name[:60]!r}, which no graph around it defines")
        owner, definition = found
        key = (owner, name)
        if key in self._plans:
            return self._plans[key]
        if key in self._visiting:
            raise FoldError(f"reaches {name[:60]!r} again (a cycle of names)")
        if depth > MAX_CHAIN_DEPTH:
            raise FoldError(f"its chain is more than {MAX_CHAIN_DEPTH} nodes deep")
        self._visited += 1
        if self._visited > MAX_CHAIN_NODES:
            raise FoldError(f"its chain has more than {MAX_CHAIN_NODES} nodes")
        kind = definition[0]
        if kind == "input":
            raise NotConstant(f"depends on the graph input {name[:60]!r} "
                              f"{_in(owner)}(not a constant)")
        if kind == "sparse":
            raise NotConstant(f"depends on the sparse initializer {name[:60]!r} (not read)")
        self._visiting.add(key)
        try:
            if kind == "initializer":
                plan = self._stored(definition[1], f"reaches the initializer {name[:60]!r}, which")
            else:
                plan = self._operator(owner, definition[1], definition[2], depth)
        finally:
            self._visiting.discard(key)
        self._plans[key] = plan
        return plan

    def _check_size(self, meta: Meta, what: str) -> None:
        if self.max_bytes is not None and meta.nbytes > self.max_bytes:
            raise FoldError(f"{what} dims {list(meta.shape)[:8]} of "
                            f"{dtype_name(meta.code)}: {meta.nbytes} bytes, more than the "
                            f"memory limit of {self.max_bytes} bytes")

    def _stored(self, tensor, what: str) -> Plan:
        return stored(tensor, what, self.max_bytes)

    def _operator(self, scope: Scope, node, output: int, depth: int) -> Plan:
        op = node.op_type
        if node.domain not in ONNX_DOMAINS or op not in FOLDED:
            raise NotConstant(f"is computed by {node_text(node)}"
                              + (f" of the domain {node.domain[:40]!r}"
                                 if node.domain not in ONNX_DOMAINS else "")
                              + ", which the reader does not fold (it folds "
                              + ", ".join(FOLDED) + ")")
        if len(node.input) > MAX_NODE_INPUTS:
            raise FoldError(f"is folded through {node_text(node)}, which has {len(node.input)} "
                            "inputs, more than the "
                            f"{MAX_NODE_INPUTS} a folded chain may have")
        builder = OPERATORS[op]
        try:
            plan = builder(Ctx(self, scope, node, depth), output)
        except Bad as exc:
            raise FoldError(f"is folded through {node_text(node)}, which {exc}") from None
        self._check_size(plan.meta, f"is folded through {node_text(node)}, which would make "
                                    f"{node.output[output][:60]!r}")
        return plan

    # computing ---------------------------------------------------------------------------------

    def _key(self, scope: Scope, name: str) -> tuple[Scope, str]:
        return scope.lookup(name)[0], name  # planned: it is defined

    def _chain(self, scope: Scope, name: str) -> set[tuple[Scope, str]]:
        seen, todo = set(), [self._key(scope, name)]
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            plan = self._plans[key]
            if plan.scope is not None:
                todo += [self._key(plan.scope, i) for i in plan.inputs]
        return seen

    def _compute(self, scope: Scope, name: str, memo: dict) -> np.ndarray:
        key = self._key(scope, name)
        if key not in memo:
            plan = self._plans[key]
            if plan.load is not None:
                value = plan.load()
            else:
                args = [self._compute(plan.scope, i, memo) for i in plan.inputs]
                with np.errstate(all="ignore"):
                    value = np.asarray(plan.compute(*args))
            want = DTYPES[plan.meta.code][1]
            assert value.shape == plan.meta.shape and value.dtype == want, (
                name, value.shape, value.dtype, plan.meta)
            memo[key] = value
        return memo[key]
