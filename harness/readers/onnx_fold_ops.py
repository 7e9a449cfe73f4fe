"""The ONNX operators a constant fold computes (:mod:`harness.readers.onnx_fold`), each with
ONNX's semantics for its opset: a function that returns the plan of its output ``output`` (its
:class:`Meta` computed from its inputs' Metas and its parameters, and the NumPy function that
computes it from its data inputs), refusing what it may not fold (:class:`Bad`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.readers.onnx_fold_types import (
    DTYPES,
    FLOATS,
    INTEGERS,
    MAX_RANK,
    Bad,
    FoldError,
    Meta,
    Plan,
    dtype_name,
    node_text,
    stored,
)
from harness.readers.onnx_proto import attribute_value


class Ctx:
    """One node being planned: its inputs' Metas, its attributes and parameters. ``folder``
    (a :class:`harness.readers.onnx_fold.Folder`) plans and folds its inputs' chains in
    ``scope``."""

    def __init__(self, folder: Any, scope: Any, node, depth: int) -> None:
        self.folder, self.scope, self.node, self.depth = folder, scope, node, depth
        self.used: list[str] = []

    def bad(self, text: str) -> Bad:
        return Bad(text)

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
        return self.folder.plan_tensor(self.scope, name, self.depth + 1).meta

    def integer_tensor(self, k: int) -> np.ndarray:
        """Parameter input ``k`` (starts, axes, a shape, indices), folded now: an integer
        tensor, its chain checked as a weight's is."""
        name = self.name(k)
        meta = self.folder.plan_tensor(self.scope, name, self.depth + 1).meta
        if meta.code not in INTEGERS:
            raise self.bad(f"takes its input {k} ({name[:60]!r}) as {dtype_name(meta.code)}; "
                           "expected int32 or int64")
        return self.folder.evaluate(self.scope, name).astype(np.int64)

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
                    return attribute_value(a, node_text(self.node))
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

    def plan(self, meta: Meta, compute, inputs: int = 1) -> Plan:
        if len(meta.shape) > MAX_RANK:
            raise self.bad(f"makes a tensor of {len(meta.shape)} dimensions")
        names = tuple(self.name(k) for k in range(inputs))
        return Plan(meta, scope=self.scope, inputs=names, compute=compute)


def fold_constant(c: Ctx, output: int) -> Plan:
    a = c.node.attribute[0]
    if a.name == "value":
        return stored(a.t, f"reaches {node_text(c.node)}, whose value", c.folder.max_bytes)
    if a.name in ("value_float", "value_floats", "value_int", "value_ints"):
        value = attribute_value(a, node_text(c.node))
        code = 1 if "float" in a.name else 7
        array = np.asarray(value, dtype=DTYPES[code][1])
        return Plan(Meta(code, array.shape), load=lambda: array)
    raise c.bad(f"holds its value as {a.name[:40]!r}; the reader folds value, "
                "value_float(s) and value_int(s)")


def fold_identity(c: Ctx, output: int) -> Plan:
    m = c.data(0)
    return c.plan(m, lambda x: x)


def fold_cast(c: Ctx, output: int) -> Plan:
    m = c.data(0)
    to = c.attr("to")
    if to not in DTYPES:
        raise c.bad(f"casts to {dtype_name(to)}; the reader folds casts to float, double, "
                    "float16, bfloat16, int32 and int64")

    def cast(x: np.ndarray) -> np.ndarray:
        if to in INTEGERS and m.code in FLOATS:
            if not np.isfinite(x).all():
                raise FoldError(f"is folded through {node_text(c.node)}, which casts NaN or "
                                "Inf to an integer")
            x = np.trunc(x)
        if to == 16:
            import ml_dtypes

            return np.asarray(x).astype(ml_dtypes.bfloat16).astype(np.float32)
        return x.astype(DTYPES[to][1])

    return c.plan(Meta(to, m.shape), cast)


def fold_slice(c: Ctx, output: int) -> Plan:
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


def fold_split(c: Ctx, output: int) -> Plan:
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


def fold_concat(c: Ctx, output: int) -> Plan:
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


def fold_unsqueeze(c: Ctx, output: int) -> Plan:
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


def fold_squeeze(c: Ctx, output: int) -> Plan:
    m = c.data(0)
    axes = c.attr("axes", None) if c.opset("Squeeze") < 13 else c.ints(1, None)
    if axes is None:
        axes = [k for k, d in enumerate(m.shape) if d == 1]
    axes = c.axes(axes, len(m.shape))
    if any(m.shape[a] != 1 for a in axes):
        raise c.bad(f"squeezes axes {axes[:8]} of dims {list(m.shape)[:8]}: not all 1")
    shape = [d for k, d in enumerate(m.shape) if k not in axes]
    return c.plan(Meta(m.code, tuple(shape)), lambda x: x.reshape(shape))


def fold_reshape(c: Ctx, output: int) -> Plan:
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


def fold_transpose(c: Ctx, output: int) -> Plan:
    m = c.data(0)
    rank = len(m.shape)
    perm = c.attr("perm", None)
    perm = list(range(rank))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(rank)):
        raise c.bad(f"permutes {rank} axes by {perm[:8]}")
    return c.plan(Meta(m.code, tuple(m.shape[p] for p in perm)),
                  lambda x: np.transpose(x, perm))


def fold_gather(c: Ctx, output: int) -> Plan:
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


OPERATORS: dict[str, Callable[[Ctx, int], Plan]] = {
    "Constant": fold_constant,
    "Identity": fold_identity,
    "Cast": fold_cast,
    "Slice": fold_slice,
    "Split": fold_split,
    "Concat": fold_concat,
    "Unsqueeze": fold_unsqueeze,
    "Squeeze": fold_squeeze,
    "Reshape": fold_reshape,
    "Transpose": fold_transpose,
    "Gather": fold_gather,
}
