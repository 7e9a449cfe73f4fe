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
above :data:`MAX_RANK` or a cycle of names is refused. What the chain reaches that is not a
constant (a graph input, another operator's output, a name nothing defines) raises
:class:`NotConstant`; anything else wrong, :class:`FoldError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.readers.onnx_proto import EXTERNAL, ONNX_DOMAINS, attribute_value, tensor_values

MAX_CHAIN_DEPTH = 100  # nodes from a weight back to a constant (torch's cell: 4)
MAX_CHAIN_NODES = 10_000  # nodes one fold visits, parameters included
MAX_NODE_INPUTS = 4096  # a Concat of the gate blocks has a handful
MAX_RANK = 32

# TensorProto.DataType -> (name, NumPy dtype it is held in, bytes an element takes held)
DTYPES = {1: ("FLOAT", np.float32, 4), 10: ("FLOAT16", np.float16, 2),
          11: ("DOUBLE", np.float64, 8), 16: ("BFLOAT16", np.float32, 4),  # bf16 held exactly
          6: ("INT32", np.int32, 4), 7: ("INT64", np.int64, 8)}
FLOATS = (1, 10, 11, 16)
INTEGERS = (6, 7)
FOLDED = ("Constant", "Identity", "Cast", "Slice", "Split", "Concat", "Unsqueeze", "Squeeze",
          "Reshape", "Transpose", "Gather")


class NotConstant(Exception):
    """A weight that depends on something other than constants (the message says what)."""


class FoldError(Exception):
    """A chain that cannot or may not be folded (malformed, hostile, too large)."""


def dtype_name(code: int) -> str:
    from onnx import TensorProto

    if code in DTYPES:
        return DTYPES[code][0]
    return (TensorProto.DataType.Name(code) if code in TensorProto.DataType.values()
            else str(code))


@dataclass(frozen=True)
class Meta:
    """A folded tensor's ONNX element type and shape, known before it is computed."""

    code: int
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.code][2]


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


def _node(node) -> str:
    return f"node {node.name[:60]!r} ({node.op_type[:40]})"


@dataclass
class _Plan:
    """How one folded tensor is computed: ``compute(*inputs)`` of the data ``inputs`` (names
    in ``scope``), or ``load()`` for a stored tensor."""

    meta: Meta
    scope: Scope | None = None
    inputs: tuple[str, ...] = ()
    compute: object = None
    load: object = None


class Folder:
    """Folds constant chains of one model (``opset``: its ONNX opset import, None where it has
    none) under ``max_bytes`` (None: no limit)."""

    def __init__(self, opset: int | None, max_bytes: int | None) -> None:
        self.opset, self.max_bytes = opset, max_bytes
        self._plans: dict[tuple[Scope, str], _Plan] = {}
        self._visiting: set[tuple[Scope, str]] = set()
        self._visited = 0

    # the two phases ----------------------------------------------------------------------------

    def meta(self, scope: Scope, name: str) -> Meta:
        """The dtype and shape ``name`` folds to, every tensor of its chain checked against the
        memory limit; nothing but small integer parameters is decoded."""
        self._visited = 0
        return self._plan(scope, name, 0).meta

    def value(self, scope: Scope, name: str) -> np.ndarray:
        """``name`` folded: its chain planned (:meth:`meta`), the chain's tensors together
        checked against the memory limit, then computed."""
        self._visited = 0
        self._plan(scope, name, 0)
        return self._evaluate(scope, name)

    def _evaluate(self, scope: Scope, name: str) -> np.ndarray:
        chain = self._chain(scope, name)
        total = sum(self._plans[k].meta.nbytes for k in chain)
        if self.max_bytes is not None and total > self.max_bytes:
            raise FoldError(f"needs {total} bytes of tensors ({len(chain)} of them) to fold "
                            f"{name[:60]!r}, more than the memory limit of {self.max_bytes} "
                            "bytes")
        return self._compute(scope, name, {})

    # planning ----------------------------------------------------------------------------------

    def _plan(self, scope: Scope, name: str, depth: int) -> _Plan:
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

    def _stored(self, tensor, what: str) -> _Plan:
        if tensor.data_location == EXTERNAL:
            raise FoldError(f"{what} is stored as external data (in another file): refused "
                            "(weights are read from the model file only)")
        if tensor.data_type not in DTYPES:
            raise FoldError(f"{what} holds {dtype_name(tensor.data_type)} values; expected "
                            "float, double, float16 or bfloat16 (int32 or int64 for shapes, "
                            "axes and indices)")
        dims = tuple(tensor.dims)
        if any(d < 0 for d in dims) or len(dims) > MAX_RANK:
            raise FoldError(f"{what} declares dims {list(dims)[:8]}")
        code = tensor.data_type
        meta = Meta(code, dims)
        if self.max_bytes is not None and meta.nbytes > self.max_bytes:
            raise FoldError(f"{what} declares dims {list(dims)[:8]} of {dtype_name(code)}: "
                            f"{meta.nbytes} bytes, more than the memory limit of "
                            f"{self.max_bytes} bytes")
        return _Plan(meta, load=lambda: tensor_values(tensor).astype(DTYPES[code][1],
                                                                     copy=False))

    def _operator(self, scope: Scope, node, output: int, depth: int) -> _Plan:
        op = node.op_type
        if node.domain not in ONNX_DOMAINS or op not in FOLDED:
            raise NotConstant(f"is computed by {_node(node)}"
                              + (f" of the domain {node.domain[:40]!r}"
                                 if node.domain not in ONNX_DOMAINS else "")
                              + ", which the reader does not fold (it folds "
                              + ", ".join(FOLDED) + ")")
        if len(node.input) > MAX_NODE_INPUTS:
            raise FoldError(f"is folded through {_node(node)}, which has {len(node.input)} "
                            "inputs, more than the "
                            f"{MAX_NODE_INPUTS} a folded chain may have")
        builder = getattr(self, f"_{op.lower()}")
        try:
            plan = builder(_Ctx(self, scope, node, depth), output)
        except _Bad as exc:
            raise FoldError(f"is folded through {_node(node)}, which {exc}") from None
        self._check_size(plan.meta, f"is folded through {_node(node)}, which would make "
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

    # the operators -----------------------------------------------------------------------------
    # Each returns the plan of its output ``output``: its Meta computed from its inputs' Metas
    # and its parameters, and the NumPy function that computes it from its data inputs.

    def _constant(self, c: _Ctx, output: int) -> _Plan:
        a = c.node.attribute[0]
        if a.name == "value":
            return self._stored(a.t, f"reaches {_node(c.node)}, whose value")
        if a.name in ("value_float", "value_floats", "value_int", "value_ints"):
            value = attribute_value(a, _node(c.node))
            code = 1 if "float" in a.name else 7
            array = np.asarray(value, dtype=DTYPES[code][1])
            return _Plan(Meta(code, array.shape), load=lambda: array)
        raise c.bad(f"holds its value as {a.name[:40]!r}; the reader folds value, "
                    "value_float(s) and value_int(s)")

    def _identity(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        return c.plan(m, lambda x: x)

    def _cast(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        to = c.attr("to")
        if to not in DTYPES:
            raise c.bad(f"casts to {dtype_name(to)}; the reader folds casts to float, double, "
                        "float16, bfloat16, int32 and int64")

        def cast(x: np.ndarray) -> np.ndarray:
            if to in INTEGERS and m.code in FLOATS:
                if not np.isfinite(x).all():
                    raise FoldError(f"is folded through {_node(c.node)}, which casts NaN or "
                                    "Inf to an integer")
                x = np.trunc(x)
            if to == 16:
                import ml_dtypes

                return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32)
            return x.astype(DTYPES[to][1])

        return c.plan(Meta(to, m.shape), cast)

    def _slice(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        opset = c.opset("Slice")
        if opset < 10:
            starts, ends = c.attr("starts"), c.attr("ends")
            axes, steps = c.attr("axes", None), None
        else:
            starts, ends = c.ints(1), c.ints(2)
            axes, steps = c.ints(3, None), c.ints(4, None)
        if axes is None:
            axes = list(range(len(starts)))
        if steps is None:
            steps = [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise c.bad(f"has {len(starts)} starts, {len(ends)} ends, {len(axes)} axes and "
                        f"{len(steps)} steps; expected as many of each")
        axes = c.axes(axes, len(m.shape))
        index = [slice(None)] * len(m.shape)
        shape = list(m.shape)
        for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
            dim = m.shape[axis]
            if step == 0:
                raise c.bad("has a step of 0")
            start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
            if step > 0:
                start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            else:
                start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            shape[axis] = max(0, -(-(end - start) // step))
            index[axis] = slice(start, end if end >= 0 else None, step)
        where = tuple(index)
        return c.plan(Meta(m.code, tuple(shape)), lambda x: x[where])

    def _split(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        opset = c.opset("Split")
        axis = c.axes([c.attr("axis", 0)], len(m.shape))[0]
        dim, parts = m.shape[axis], len(c.node.output)
        split = c.attr("split", None) if opset < 13 else c.ints(1, None)
        if split is None:
            if opset >= 18:
                count = c.attr("num_outputs", None)
                if count is None or count != parts or count < 1:
                    raise c.bad(f"has num_outputs {count} and {parts} outputs; expected as "
                                "many")
                chunk = -(-dim // count)
                split = [min(chunk, max(0, dim - k * chunk)) for k in range(count)]
            else:
                if dim % parts:
                    raise c.bad(f"splits a dimension of {dim} into {parts} equal parts")
                split = [dim // parts] * parts
        if len(split) != parts or sum(split) != dim or any(s < 0 for s in split):
            raise c.bad(f"splits a dimension of {dim} into {list(split)[:8]} for {parts} "
                        "outputs")
        begin = sum(split[:output])
        index = tuple([slice(None)] * axis + [slice(begin, begin + split[output])])
        shape = list(m.shape)
        shape[axis] = split[output]
        return c.plan(Meta(m.code, tuple(shape)), lambda x: x[index])

    def _concat(self, c: _Ctx, output: int) -> _Plan:
        if not c.node.input:
            raise c.bad("has no inputs")
        metas = [c.data(k) for k in range(len(c.node.input))]
        rank = len(metas[0].shape)
        axis = c.axes([c.attr("axis")], rank)[0]
        for m in metas:
            if m.code != metas[0].code or len(m.shape) != rank or any(
                    a != b for k, (a, b) in enumerate(zip(m.shape, metas[0].shape, strict=True))
                    if k != axis):
                raise c.bad(f"joins {dtype_name(m.code)} {list(m.shape)[:8]} to "
                            f"{dtype_name(metas[0].code)} {list(metas[0].shape)[:8]} on axis "
                            f"{axis}")
        shape = list(metas[0].shape)
        shape[axis] = sum(m.shape[axis] for m in metas)
        return c.plan(Meta(metas[0].code, tuple(shape)),
                      lambda *xs: np.concatenate(xs, axis=axis), inputs=len(metas))

    def _unsqueeze(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        axes = c.attr("axes") if c.opset("Unsqueeze") < 13 else c.ints(1)
        rank = len(m.shape) + len(axes)
        if rank > MAX_RANK:
            raise c.bad(f"makes a tensor of {rank} dimensions")
        axes = sorted(c.axes(axes, rank))
        shape = list(m.shape)
        for a in axes:
            shape.insert(a, 1)
        return c.plan(Meta(m.code, tuple(shape)), lambda x: x.reshape(shape))

    def _squeeze(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        axes = c.attr("axes", None) if c.opset("Squeeze") < 13 else c.ints(1, None)
        if axes is None:
            axes = [k for k, d in enumerate(m.shape) if d == 1]
        axes = c.axes(axes, len(m.shape))
        if any(m.shape[a] != 1 for a in axes):
            raise c.bad(f"squeezes axes {axes[:8]} of dims {list(m.shape)[:8]}: not all 1")
        shape = [d for k, d in enumerate(m.shape) if k not in axes]
        return c.plan(Meta(m.code, tuple(shape)), lambda x: x.reshape(shape))

    def _reshape(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        wanted = c.attr("shape") if c.opset("Reshape") < 5 else c.ints(1)
        if len(wanted) > MAX_RANK:
            raise c.bad(f"reshapes to {len(wanted)} dimensions, more than {MAX_RANK}")
        allowzero = c.attr("allowzero", 0)
        shape = []
        for k, d in enumerate(wanted):
            if d == 0 and not allowzero:
                if k >= len(m.shape):
                    raise c.bad(f"copies dimension {k} of {list(m.shape)[:8]}, which it lacks")
                d = m.shape[k]
            shape.append(d)
        if shape.count(-1) > 1 or any(d < -1 for d in shape):
            raise c.bad(f"reshapes to {list(wanted)[:8]}")
        count = math.prod(m.shape)
        if -1 in shape:
            rest = math.prod(d for d in shape if d != -1)
            if rest == 0 or count % rest:
                raise c.bad(f"reshapes {list(m.shape)[:8]} to {list(wanted)[:8]}")
            shape[shape.index(-1)] = count // rest
        if math.prod(shape) != count:
            raise c.bad(f"reshapes {count} elements {list(m.shape)[:8]} to "
                        f"{list(wanted)[:8]}")
        return c.plan(Meta(m.code, tuple(shape)), lambda x: x.reshape(shape))

    def _transpose(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        rank = len(m.shape)
        perm = c.attr("perm", None)
        perm = list(range(rank))[::-1] if perm is None else list(perm)
        if sorted(perm) != list(range(rank)):
            raise c.bad(f"permutes {rank} axes by {perm[:8]}")
        return c.plan(Meta(m.code, tuple(m.shape[p] for p in perm)),
                      lambda x: np.transpose(x, perm))

    def _gather(self, c: _Ctx, output: int) -> _Plan:
        m = c.data(0)
        axis = c.axes([c.attr("axis", 0)], len(m.shape))[0]
        indices = c.integer_tensor(1)
        dim = m.shape[axis]
        if indices.size and (indices.min() < -dim or indices.max() >= dim):
            worst = int(indices.max() if indices.max() >= dim else indices.min())
            raise c.bad(f"gathers index {worst} of a dimension of {dim}")
        indices = np.where(indices < 0, indices + dim, indices)
        shape = m.shape[:axis] + indices.shape + m.shape[axis + 1:]
        return c.plan(Meta(m.code, tuple(shape)), lambda x: np.take(x, indices, axis=axis))


class _Bad(Exception):
    """A node the folder refuses (the message follows the node's name)."""


class _Ctx:
    """One node being planned: its inputs' Metas, its attributes and parameters."""

    def __init__(self, folder: Folder, scope: Scope, node, depth: int) -> None:
        self.folder, self.scope, self.node, self.depth = folder, scope, node, depth
        self.used: list[str] = []

    def bad(self, text: str) -> _Bad:
        return _Bad(text)

    def opset(self, op: str) -> int:
        if self.folder.opset is None:
            raise self.bad(f"is a {op}, whose inputs depend on the opset, and the model "
                           "imports no ONNX opset")
        return self.folder.opset

    def name(self, k: int) -> str | None:
        inputs = self.node.input
        return inputs[k] if k < len(inputs) and inputs[k] else None

    def data(self, k: int) -> Meta:
        """The Meta of data input ``k`` (planned: its chain is part of this one)."""
        name = self.name(k)
        if name is None:
            raise self.bad(f"has no input {k}")
        self.used.append(name)
        return self.folder._plan(self.scope, name, self.depth + 1).meta

    def integer_tensor(self, k: int) -> np.ndarray:
        """Parameter input ``k`` (starts, axes, a shape, indices), folded now: an integer
        tensor, its chain checked as a weight's is."""
        name = self.name(k)
        meta = self.folder._plan(self.scope, name, self.depth + 1).meta
        if meta.code not in INTEGERS:
            raise self.bad(f"takes its input {k} ({name[:60]!r}) as {dtype_name(meta.code)}; "
                           "expected int32 or int64")
        return self.folder._evaluate(self.scope, name).astype(np.int64)

    def ints(self, k: int, default: object = "required") -> list[int] | None:
        if self.name(k) is None:
            if default == "required":
                raise self.bad(f"has no input {k}")
            return default  # type: ignore[return-value]
        values = self.integer_tensor(k)
        if values.ndim > 1:
            raise self.bad(f"takes a {values.ndim}-d input {k}; expected a list")
        return [int(v) for v in values.reshape(-1)]

    def attr(self, name: str, default: object = "required") -> object:
        for a in self.node.attribute:
            if a.name == name:
                try:
                    return attribute_value(a, _node(self.node))
                except ValueError as exc:
                    raise self.bad(str(exc)) from None
        if default == "required":
            raise self.bad(f"has no attribute {name!r}")
        return default

    def axes(self, axes, rank: int) -> list[int]:
        out = []
        for a in axes:
            if not isinstance(a, int) or not -rank <= a < rank:
                raise self.bad(f"names axis {a} of a {rank}-d tensor")
            out.append(a + rank if a < 0 else a)
        if len(set(out)) != len(out):
            raise self.bad(f"names axes {list(axes)[:8]}, one twice")
        return out

    def plan(self, meta: Meta, compute, inputs: int = 1) -> _Plan:
        if len(meta.shape) > MAX_RANK:
            raise self.bad(f"makes a tensor of {len(meta.shape)} dimensions")
        names = tuple(self.name(k) for k in range(inputs))
        return _Plan(meta, scope=self.scope, inputs=names, compute=compute)
