"""Layouts as data: where each canonical block sits inside a framework's native tensors.

A :class:`Layout` is a function of the case that returns :class:`NativeTensor` descriptions,
worked out on the case's own sizes. Each native tensor lists :class:`Placement` s: an index
into the tensor, the canonical blocks summed into it, how the block is laid there (``copy``,
``transpose``, or a C-order ``reshape`` of the ``[H, in]`` block into the slice's shape, as
cuDNN's flat buffers do), and whether the case's ``forget_bias`` is folded into it. One
description drives :meth:`Layout.to_native`, :meth:`Layout.from_native`, the mapping tables,
conversion and the doctor, so a mapping table cannot disagree with the code that runs.

The helpers :func:`grid` and :func:`fused` build the usual shapes: gate blocks side by side,
input rows over recurrent rows (TF1 cells' ``[x, h] @ kernel``), summed biases, a leading
direction axis (ONNX).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from harness.errors import WeightsError
from harness.params import DIRECTION_NAMES, Canonical, expected_shapes, key, layer_dirs
from harness.spec import Case


class Placement(NamedTuple):
    """One canonical block (or a sum of blocks) inside a native tensor."""

    index: tuple  # ints and slices into the native tensor
    sources: tuple[str, ...]  # canonical keys summed here, e.g. (bW_i, bR_i)
    transform: str = "copy"  # copy | transpose | reshape (C order)
    fold_forget_bias: bool = False  # the case's forget_bias is stored in this block
    where: str = ""  # the index in words of the sizes, e.g. "[2H:3H, :]"

    def describe(self, forget_bias: float = 0.0, *, scoped: bool = True) -> str:
        """Words for the mapping table, e.g. ``W_f transposed``, ``bW_i + bR_i``.

        ``forget_bias`` is the case's value (named only when it is stored here and nonzero);
        ``scoped=False`` drops the "(layer k, direction)" suffix, for a single unidirectional
        layer. A sum of blocks of one layer and direction names its scope once."""
        names = [s.rsplit("/", 1)[1] for s in self.sources]
        if scoped:
            scopes = {s.rsplit("/", 1)[0] for s in self.sources}
            if len(scopes) == 1:
                names[-1] += " " + _short(self.sources[-1]).split(" ", 1)[1]
            else:
                names = [_short(s) for s in self.sources]
        text = " + ".join(names)
        if self.fold_forget_bias and forget_bias:
            text += f" + forget_bias ({forget_bias:g})"
        matrix = self.sources[0].rsplit("/", 1)[1].split("_")[0] in ("W", "R", "Wp")
        flat = sum(isinstance(i, slice) for i in self.index) == 1
        how = {
            "copy": "",
            "transpose": " transposed",
            "reshape": (" (the row-major cuDNN matrix, flattened in C order)" if flat and matrix
                        else " (C-order reshape of the cuDNN matrix, not a transpose)"),
        }[self.transform]
        return text + how


def _short(k: str) -> str:
    layer, direction, name = k.split("/")
    return f"{name} ({layer.replace('layer', 'layer ')}, {direction})"


@dataclass(frozen=True)
class NativeTensor:
    """A native tensor and the placements that fill it."""

    name: str
    shape: tuple[int, ...]
    placements: tuple[Placement, ...]


class OptionalTensor(NamedTuple):
    """A native tensor a file may leave out, or hold though the case does not read it.

    ``default``: the value the framework uses when the tensor is absent (ONNX: ``B`` and ``P``
    are zeros, ``sequence_lens`` is every sequence's full length). A tensor the case reads
    (one of :meth:`Layout.tensors`) is filled with it when missing; one the case does not read
    is accepted only when it holds it, and refused with ``why`` otherwise."""

    shape: tuple[int, ...]
    default: float | tuple = 0.0
    why: str = ""  # why a non-default value cannot be taken, e.g. "the case has no peepholes"


@dataclass(frozen=True)
class Layout:
    """A framework's storage of the canonical parameters.

    ``describe(case, layer, direction)`` returns the native tensors of one layer and direction;
    tensors of the same name from several (layer, direction) are merged (their placements
    must not overlap). ``runtime`` lists what the framework does at run time that no tensor
    stores (shown in mapping tables). ``sum_policy``: from_native gives a summed block to the
    first source and zero to the others.
    """

    name: str
    title: str
    cells: tuple[str, ...]
    describe: Callable[[Case, int, int], list[NativeTensor]]
    runtime: Callable[[Case], list[str]] = field(default=lambda case: [])
    scoped_names: bool = False  # Keras/TF convention: bare names for a single layer/direction
    # Tensors a file may omit or hold at their default (ONNX's optional inputs, BlockLSTM's
    # zero peepholes): name -> OptionalTensor, worked out on the case.
    optional: Callable[[Case], dict[str, OptionalTensor]] = field(default=lambda case: {})

    # ----------------------------------------------------------------------------------------
    def tensors(self, case: Case) -> list[NativeTensor]:
        """The native tensors of the case: ``describe`` over every layer and direction,
        tensors of one name merged, each checked to be tiled by its placements
        (:func:`tiles`)."""
        assert case.cell in self.cells, f"{self.name} holds no {case.cell}"  # callers ask
        merged: dict[str, NativeTensor] = {}
        single = case.num_layers == 1 and case.num_directions == 1
        for layer, d in layer_dirs(case):
            for t in self.describe(case, layer, d):
                if self.scoped_names and not single:
                    t = replace(t, name=f"layer{layer}/{DIRECTION_NAMES[d]}/{t.name}")
                if t.name in merged:
                    old = merged[t.name]
                    assert old.shape == t.shape, (t.name, old.shape, t.shape)
                    t = replace(old, placements=old.placements + t.placements)
                merged[t.name] = t
        for t in merged.values():
            assert tiles(t), f"{self.name}: {t.name} placements do not tile it"
        return list(merged.values())

    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.tensors(case)}

    def to_native(self, canonical: Canonical, case: Case,
                  dtype: type = np.float64) -> dict[str, np.ndarray]:
        """Native tensors holding ``canonical``, float64 or ``dtype``, placement by placement.
        A summed or folded block is added up in float64 and rounded once, where it is stored
        (one rounding, as for a block copied as it is)."""
        out: dict[str, np.ndarray] = {}
        for t in self.tensors(case):
            arr = np.empty(t.shape, dtype=dtype)
            for pl in t.placements:
                value = canonical[pl.sources[0]]
                for s in pl.sources[1:]:
                    value = value + canonical[s]
                if pl.fold_forget_bias and case.forget_bias:
                    value = value + case.forget_bias
                dst = arr[pl.index]
                dst[...] = _apply(pl.transform, value, dst.shape)
            out[t.name] = arr
        return out

    def from_native(
        self, native: dict[str, np.ndarray], case: Case, *, file: str | None = None
    ) -> Canonical:
        """Canonical parameters from native tensors; a summed block goes to its first source."""
        tensors = self.tensors(case)
        expected = {t.name: t.shape for t in tensors}
        native = self.with_defaults(native, case, expected, file=file)
        missing = [n for n in expected if n not in native]
        if missing:
            raise WeightsError(
                f"missing tensor(s) {', '.join(missing)} for layout {self.name!r} "
                f"(expected: {', '.join(expected)})", file=file, field=missing[0])
        extra = [n for n in native if n not in expected]
        if extra:
            raise WeightsError(
                f"unexpected tensor(s) {', '.join(extra)} for layout {self.name!r} "
                f"(expected: {', '.join(expected)})", file=file, field=extra[0])
        out: dict[str, np.ndarray] = {}
        shapes = expected_shapes(case)
        for t in tensors:
            arr = np.asarray(native[t.name])
            if arr.shape != t.shape:
                raise WeightsError(f"expected shape {list(t.shape)}, got {list(arr.shape)}",
                                   file=file, field=t.name)
            if not np.issubdtype(arr.dtype, np.floating):
                raise WeightsError(f"expected floating-point values, got {arr.dtype}", file=file,
                                   field=t.name)
            arr = arr.astype(np.float64)
            if not np.isfinite(arr).all():
                raise WeightsError("contains NaN or Inf", file=file, field=t.name)
            for pl in t.placements:
                first, *rest = pl.sources
                value = _invert(pl.transform, arr[pl.index], shapes[first])
                if pl.fold_forget_bias and case.forget_bias:
                    value -= case.forget_bias
                out[first] = value
                for s in rest:
                    out[s] = np.zeros(shapes[s])
        return Canonical(out)

    def with_defaults(self, native: dict[str, np.ndarray], case: Case,
                      expected: dict[str, tuple[int, ...]], *, file: str | None = None
                      ) -> dict[str, np.ndarray]:
        """``native`` with the layout's optional tensors settled: a missing one the case reads
        takes its default; one the case does not read is dropped when it holds its default,
        refused (one line: the tensor and why) when it does not."""
        optional = self.optional(case)
        if not optional:
            return native
        native = dict(native)
        for name, opt in optional.items():
            default = np.broadcast_to(np.asarray(opt.default, dtype=np.float64), opt.shape)
            if name in expected:
                if name not in native:
                    native[name] = default.copy()
                continue
            if name not in native:
                continue
            arr = np.asarray(native.pop(name))
            if arr.shape != opt.shape:
                raise WeightsError(f"expected shape {list(opt.shape)}, got {list(arr.shape)}",
                                   file=file, field=name)
            if not np.array_equal(arr.astype(np.float64), default):
                value = ("non-zero values" if not np.any(default) else "values other than "
                         + str([float(v) for v in np.asarray(opt.default).ravel()]))
                raise WeightsError(f"holds {value}, but {opt.why}", file=file, field=name)
        return native

    def grads_from_native(self, native: dict[str, np.ndarray], case: Case) -> Canonical:
        """Canonical gradients from the gradients of the native tensors (the adjoint of
        :meth:`to_native`): every block moves back through its transform; a summed slice's
        gradient is the gradient of each block summed there (dL/dbW_i = dL/dbR_i = dL/d(bias
        slice)); a folded forget bias is a constant and changes nothing."""
        shapes = expected_shapes(case)
        out: dict[str, np.ndarray] = {}
        for t in self.tensors(case):
            arr = np.asarray(native[t.name], dtype=np.float64)
            if arr.shape != t.shape:
                raise ValueError(f"gradient of {t.name}: shape {list(arr.shape)}, "
                                 f"expected {list(t.shape)}")
            for pl in t.placements:
                for s in pl.sources:
                    out[s] = _invert(pl.transform, arr[pl.index], shapes[s])
        # A block the layout places nowhere (nnx.GRUCell's missing b_hn, google/flax#5594) does
        # not reach the native function: the adjoint of dropping it is a zero gradient, which
        # the comparison then sets against the reference's.
        for s, shape in shapes.items():
            out.setdefault(s, np.zeros(shape))
        return Canonical(out)

    def mapping(self, case: Case) -> list[dict[str, str]]:
        """Rows of the mapping table: tensor, shape, slice, canonical block and how."""
        rows = []
        scoped = not (case.num_layers == 1 and case.num_directions == 1)
        for t in self.tensors(case):
            for pl in t.placements:
                rows.append({
                    "tensor": t.name,
                    "shape": "[" + ", ".join(map(str, t.shape)) + "]",
                    "slice": pl.where or _index_text(pl.index),
                    "holds": pl.describe(case.forget_bias, scoped=scoped),
                })
        return rows


def tiles(t: NativeTensor) -> bool:
    """Whether ``t``'s placements cover each of its elements exactly once: as many elements
    as the tensor holds, and no two placements sharing one. Worked out on the placements'
    boxes (:func:`box`), not element by element (seed 000's 11 M weights would take ~10 ms to
    count per description): in order along the first axis, each box against the ones before
    it that reach past its start there (in a grid, its row)."""
    boxes = sorted(b for b in (box(pl.index, t.shape) for pl in t.placements)
                   if all(lo < hi for lo, hi in b))  # an empty one places nothing
    if sum(math.prod(hi - lo for lo, hi in b) for b in boxes) != math.prod(t.shape):
        return False
    open_: list[tuple[tuple[int, int], ...]] = []
    for b in boxes:
        open_ = [a for a in open_ if a[0][1] > b[0][0]]
        if any(all(lo < b_hi and b_lo < hi for (lo, hi), (b_lo, b_hi) in zip(a[1:], b[1:],
                                                                             strict=True))
               for a in open_):
            return False
        open_.append(b)
    return True


def box(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """[lo, hi) per axis of what ``index`` selects in a tensor of ``shape`` (as NumPy does:
    slices clipped, negative ints from the end, missing trailing axes and ``...`` whole).
    A placement's index is ints and unit-step slices: anything else is refused."""
    if ... in index:
        at = index.index(...)
        index = (*index[:at], *[slice(None)] * (len(shape) - len(index) + 1), *index[at + 1:])
    if len(index) > len(shape):
        raise IndexError(f"index {index} has more axes than shape {shape}")
    out = []
    for axis, n in enumerate(shape):
        i = index[axis] if axis < len(index) else slice(None)
        if isinstance(i, slice):
            lo, hi, step = i.indices(n)
            if step != 1:
                raise ValueError(f"a placement's slice has step {step}: {index}")
            out.append((lo, max(lo, hi)))
        elif isinstance(i, int | np.integer) and -n <= i < n:
            out.append((int(i) % n, int(i) % n + 1))
        else:
            raise IndexError(f"{i!r} does not index an axis of {n} in a placement: {index}")
    return tuple(out)


def _apply(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if transform == "copy":
        return value
    if transform == "transpose":
        return value.T
    if transform == "reshape":
        return value.reshape(shape)
    raise AssertionError(transform)


def _invert(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if transform == "transpose":
        return value.T.copy()
    return value.reshape(shape).copy()


def _index_text(index: tuple) -> str:
    parts = []
    for s in index:
        if isinstance(s, slice):
            parts.append(":" if s.start is None and s.stop is None else f"{s.start}:{s.stop}")
        else:
            parts.append(str(s))
    return "[" + ", ".join(parts) + "]"


# Builders ------------------------------------------------------------------------------------

Tile = str | tuple[str, ...]  # a canonical NAME, or NAMEs summed into one block


class Size(NamedTuple):
    """A length along one axis, and how many input sizes I, hidden sizes H and projection
    sizes P it is end to end (its name in the mapping tables)."""

    n: int
    I: int = 0
    H: int = 0
    P: int = 0

    def plus(self, other: Size) -> Size:
        return Size(self.n + other.n, self.I + other.I, self.H + other.H, self.P + other.P)

    @property
    def name(self) -> str:
        """``I+2H``; ``0`` for none."""
        return "+".join(f"{k}{letter}" if k > 1 else letter
                        for letter, k in (("I", self.I), ("H", self.H), ("P", self.P)) if k
                        ) or "0"


def block_sizes(case: Case, layer: int) -> dict[str, tuple[Size, ...]]:
    """The shapes of the canonical blocks of each kind (``W``, ``R``, ``Wp``, ``b``: vectors)
    in the given layer: ``W`` is ``[H, in]`` with ``in`` the input size ``I`` of the first
    layer, the outputs ``H`` (``P`` when projected) of every direction of the others."""
    H, P = Size(case.hidden_size, H=1), Size(case.proj_size, P=1)
    out = P if case.proj_size else H
    D = case.num_directions
    inputs = (Size(case.input_size, I=1) if layer == 0
              else Size(D * out.n, D * out.I, D * out.H, D * out.P))
    return {"W": (H, inputs), "R": (H, out), "Wp": (P, H), "b": (H,)}


def grid(
    case: Case,
    layer: int,
    direction: int,
    name: str,
    rows: Sequence[Sequence[Tile]],
    *,
    transform: str = "copy",
    lead: tuple[int, ...] = (),
    lead_shape: tuple[int, ...] = (),
    fold_forget_bias: bool = False,
    squeeze: bool = True,
) -> NativeTensor:
    """A tensor tiled with canonical blocks: each row's blocks side by side along the last axis,
    rows stacked along the first axis (for 1-D blocks, rows become a new first axis unless there
    is one row and ``squeeze``). ``lead`` indexes leading axes of shape ``lead_shape`` (ONNX's
    direction axis). ``fold_forget_bias`` stores the case's forget_bias in the ``bW_f`` block (or
    the summed block containing it). Blocks of unequal heights in a row, or rows of unequal
    widths, leave a tensor its placements do not tile (:meth:`Layout.tensors` refuses it).
    """
    prefix = key(layer, direction, "")
    lead_where = "".join(f"{i}, " for i in lead)
    flip = transform in ("transpose", "reshape")  # the slice is [in, H]-shaped
    sizes = block_sizes(case, layer)
    one_d = len(sizes[_kind(rows[0][0])]) == 1
    stacked = not (squeeze and len(rows) == 1)
    placements: list[Placement] = []
    top = Size(0)  # the rows above the current one
    width = 0
    for r, row in enumerate(rows):
        left, cols_from = Size(0), "0"  # the blocks before the current one in its row
        height, bottom, rows_where = Size(0), top, ""
        for tile in row:
            names = (tile,) if isinstance(tile, str) else tuple(tile)
            dims = sizes[_kind(tile)]
            dims = dims[::-1] if flip else dims
            right = left.plus(dims[-1])
            cols_to = right.name
            if one_d:
                index = ((r,) if stacked else ()) + (slice(left.n, right.n),)
                where = f"{r}, {cols_from}:{cols_to}" if stacked else f"{cols_from}:{cols_to}"
            else:
                if dims[0] != height:  # the row's height (a block of another one: no tiling)
                    height = dims[0]
                    bottom = top.plus(height)
                    rows_where = ":" if len(rows) == 1 else f"{top.name}:{bottom.name}"
                index = (slice(top.n, bottom.n), slice(left.n, right.n))
                where = f"{rows_where}, {':' if len(row) == 1 else f'{cols_from}:{cols_to}'}"
            placements.append(Placement(
                lead + index, tuple([prefix + n for n in names]), transform,
                fold_forget_bias and "bW_f" in names, f"[{lead_where}{where}]"))
            left, cols_from = right, cols_to
        width = max(width, left.n)
        top = top.plus(height)
    if one_d:
        inner = (len(rows), width) if stacked else (width,)
    else:
        inner = (top.n, width)
    return NativeTensor(name, lead_shape + inner, tuple(placements))


def _kind(tile: Tile) -> str:
    """``W`` of ``W_i``, ``b`` of every vector (biases, peepholes); a sum of blocks is of its
    first block's kind."""
    kind = (tile if isinstance(tile, str) else tile[0]).split("_")[0]
    return kind if kind in ("W", "R", "Wp") else "b"


def fused(case: Case, layer: int, direction: int, name: str, kind: str | tuple[str, ...],
          order: Sequence[str], **kw) -> NativeTensor:
    """Gate blocks of one kind side by side: ``fused(..., "W", "ifgo")`` is ``[W_i W_f W_g W_o]``
    along the last axis (after ``transform``); rows instead with ``axis=0``."""
    axis = kw.pop("axis", -1)
    kinds = (kind,) if isinstance(kind, str) else kind
    tiles = [tuple(f"{k}_{g}" for k in kinds) if len(kinds) > 1 else f"{kinds[0]}_{g}"
             for g in order]
    if axis == 0 and kinds[0] in ("W", "R", "Wp"):  # matrices
        return grid(case, layer, direction, name, [[t] for t in tiles], **kw)
    return grid(case, layer, direction, name, [tiles], **kw)
