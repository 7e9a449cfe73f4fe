"""Layouts as data: where each canonical block sits inside a framework's native tensors.

A :class:`Layout` is a function of the case that returns :class:`NativeTensor` descriptions.
Each native tensor lists :class:`Placement` s: an index into the tensor, the canonical blocks
summed into it, how the block is laid there (``copy``, ``transpose``, or a C-order ``reshape``
of the ``[H, in]`` block into the slice's shape, as cuDNN's flat buffers do), and whether the
case's ``forget_bias`` is folded into it. One description drives :meth:`Layout.to_native`,
:meth:`Layout.from_native`, the mapping tables, conversion and the doctor, so a mapping table
cannot disagree with the code that runs.

The helpers :func:`grid` and :func:`vector` build the usual shapes: gate blocks side by side,
input rows over recurrent rows (TF1 cells' ``[x, h] @ kernel``), summed biases, a leading
direction axis (ONNX).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from harness.errors import WeightsError
from harness.params import (
    DIRECTION_NAMES,
    Canonical,
    block_shapes,
    expected_shapes,
    forget_shapes,
    key,
    layer_dirs,
)
from harness.spec import Case

TRANSPOSE_MIN_SIZE = 1 << 14  # smaller blocks: NumPy's copy beats a call into the kernel
Symbol = tuple[int, int, int]  # symbolic size, multiples of (I, H, P): (1, 2, 0) is "I+2H"
SYMBOL_NAMES = ("I", "H", "P")


@functools.cache
def sym(s: Symbol) -> str:
    parts = [name if n == 1 else f"{n}{name}" for name, n in zip(SYMBOL_NAMES, s, strict=True)
             if n]
    return "+".join(parts) or "0"


def _plus(a: Symbol, b: Symbol) -> Symbol:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


class Placement(NamedTuple):
    """One canonical block (or a sum of blocks) inside a native tensor (a named tuple: a
    layout's description makes hundreds, 2-3x faster than a frozen dataclass)."""

    index: tuple  # ints and slices into the native tensor
    sources: tuple[str, ...]  # canonical keys summed here, e.g. (bW_i, bR_i)
    transform: str = "copy"  # copy | transpose | reshape (C order)
    fold_forget_bias: bool = False  # the case's forget_bias is stored in this block
    where: str = ""  # symbolic index, e.g. "[2H:3H, :]"

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


Box = tuple[tuple[int, int], ...]  # [lo, hi) per axis


@dataclass(frozen=True)
class NativeTensor:
    """A native tensor and the placements that fill it. ``cover``: boxes its placements are
    known to tile exactly, each element once, by construction (:func:`grid`: blocks side by
    side in rows of one width; :func:`tiles` then checks only that the boxes tile the tensor),
    or None: the placements themselves are checked."""

    name: str
    shape: tuple[int, ...]
    placements: tuple[Placement, ...]
    cover: tuple[Box, ...] | None = field(default=None, compare=False)


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

    # ----------------------------------------------------------------------------------------
    def tensors(self, case: Case) -> list[NativeTensor]:
        """The native tensors of the case (described once per layout and case, then kept)."""
        return list(_described(self, case))

    def shapes(self, case: Case) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.tensors(case)}

    def to_native(self, canonical: Canonical, case: Case, dtype: type = np.float64, *,
                  shared: bool = False) -> dict[str, np.ndarray]:
        """Native tensors holding ``canonical``, float64 or ``dtype``: a block copied as it is
        comes from ``canonical.cast(dtype)``, a summed or folded one is added up in float64 and
        rounded once, where it is stored (one rounding either way). Every element is placed
        exactly once (checked when the description is made). A small case's blocks are placed
        one by one, a large one's in runs (:class:`_Runs`). ``shared=True``
        (for callers that only read them, as adapters do): in a large case, a tensor that is
        canonical blocks lying end to end in the cast (:meth:`Canonical.span`: all of torch's)
        comes back as a read-only view of it, not a copy."""
        return _plan(self, case).natives(canonical, case, dtype, shared)

    def from_native(
        self, native: dict[str, np.ndarray], case: Case, *, file: str | None = None
    ) -> Canonical:
        """Canonical parameters from native tensors; a summed block goes to its first source."""
        tensors = self.tensors(case)
        expected = {t.name: t.shape for t in tensors}
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
        shapes = {key(layer, d, n): s for layer, d in layer_dirs(case)
                  for n, s in block_shapes(case, layer).items()}
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
                if pl.fold_forget_bias:
                    value = value - case.forget_bias
                out[first] = value
                for s in rest:
                    out[s] = np.zeros(shapes[s])
        return Canonical(out)

    def grads_from_native(self, native: dict[str, np.ndarray], case: Case) -> Canonical:
        """Canonical gradients from the gradients of the native tensors (the adjoint of
        :meth:`to_native`): every block moves back through its transform; a summed slice's
        gradient is the gradient of each block summed there (dL/dbW_i = dL/dbR_i = dL/d(bias
        slice)); a folded forget bias is a constant and changes nothing."""
        shapes = {key(layer, d, n): s for layer, d in layer_dirs(case)
                  for n, s in block_shapes(case, layer).items()}
        out: dict[str, np.ndarray] = {}
        for t in self.tensors(case):
            arr = np.asarray(native[t.name], dtype=np.float64)
            if arr.shape != t.shape:
                raise ValueError(f"gradient of {t.name}: shape {list(arr.shape)}, "
                                 f"expected {list(t.shape)}")
            for pl in t.placements:
                for s in pl.sources:
                    out[s] = _invert(pl.transform, arr[pl.index], shapes[s])
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


_DESCRIBED: dict[tuple, tuple[NativeTensor, ...]] = {}


def _described(layout: Layout, case: Case) -> tuple[NativeTensor, ...]:
    """``layout.describe`` over every layer and direction, tensors of one name merged and
    checked to tile their tensor, kept per layout and model (:func:`_cache_key`): a pair
    converts its weights, its gradients and (for some adapters) builds its model from the same
    description, and cases of one model share it."""
    k = _cache_key(layout, case)
    if k not in _DESCRIBED:
        assert case.cell in layout.cells, f"{layout.name} holds no {case.cell}"  # callers ask
        if len(_DESCRIBED) > 1024:
            _DESCRIBED.clear()
        merged: dict[str, NativeTensor] = {}
        single = case.num_layers == 1 and case.num_directions == 1
        for layer, d in layer_dirs(case):
            for t in layout.describe(case, layer, d):
                if layout.scoped_names and not single:
                    t = replace(t, name=f"layer{layer}/{DIRECTION_NAMES[d]}/{t.name}")
                if t.name in merged:
                    old = merged[t.name]
                    assert old.shape == t.shape, (t.name, old.shape, t.shape)
                    cover = (old.cover + t.cover if old.cover is not None
                             and t.cover is not None else None)
                    t = replace(old, placements=old.placements + t.placements, cover=cover)
                merged[t.name] = t
        for t in merged.values():
            assert tiles(t), f"{layout.name}: {t.name} placements do not tile it"
        _DESCRIBED[k] = tuple(merged.values())
    return _DESCRIBED[k]


DENSE_TILE_CHECK = 1 << 16


def tiles(t: NativeTensor) -> bool:
    """Whether ``t``'s placements cover each of its elements exactly once. Where the
    placements are known to tile the boxes of ``t.cover`` (:func:`grid`'s construction,
    ``tests/test_tiles.py`` counts it on every layout), whether those few boxes tile ``t``
    (:func:`boxes_tile`: half a layout's description time, when it was counted per placement).
    Otherwise the placements: see :func:`placements_tile`."""
    return boxes_tile(t.cover, t.shape) if t.cover is not None else placements_tile(t)


def boxes_tile(boxes: Sequence[Box], shape: tuple[int, ...]) -> bool:
    """Whether ``boxes`` cover each element of ``shape`` exactly once: inside it, pairwise
    disjoint, and as many elements as it has (a few boxes: pairs in plain Python)."""
    if any(not 0 <= lo <= hi <= n for box in boxes for (lo, hi), n in zip(box, shape,
                                                                          strict=True)):
        return False
    if sum(math.prod(hi - lo for lo, hi in box) for box in boxes) != math.prod(shape):
        return False
    return not any(all(lo < b_hi and b_lo < hi for (lo, hi), (b_lo, b_hi) in zip(a, b,
                                                                                 strict=True))
                   for k, a in enumerate(boxes) for b in boxes[k + 1:])


def placements_tile(t: NativeTensor) -> bool:
    """Whether ``t``'s placements cover each of its elements exactly once, from the
    placements alone. A placement of ints and unit-step slices is a box; the boxes' edges cut
    every axis into intervals, and each box covers whole cells of that coarse grid, so counting
    on the grid (a few cells, whatever the tensor's size) is counting on the elements (seed
    000's 11 M elements: ~1 ms of int8 counts a layout -> ~0.1 ms). Small tensors, and any index
    that is not a box, are counted element by element (cheaper below :data:`DENSE_TILE_CHECK`
    elements)."""
    boxes = ([_box(pl.index, t.shape) for pl in t.placements]
             if math.prod(t.shape) > DENSE_TILE_CHECK else [None])
    if any(b is None for b in boxes):
        covered = np.zeros(t.shape, dtype=np.int8)
        for pl in t.placements:
            covered[pl.index] += 1
        return bool((covered == 1).all())
    cuts = [sorted({0, n, *(e for b in boxes for e in b[axis])})
            for axis, n in enumerate(t.shape)]
    covered = np.zeros([len(c) - 1 for c in cuts], dtype=np.int64)
    for b in boxes:
        covered[tuple(slice(c.index(lo), c.index(hi)) for c, (lo, hi) in zip(cuts, b,
                                                                           strict=True))] += 1
    return bool((covered == 1).all())


def _box(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """``index`` as [lo, hi) per axis (what NumPy would select: slices clipped, negative ints
    from the end), or None for anything but ints and unit-step slices."""
    if not isinstance(index, tuple) or len(index) > len(shape):
        return None
    box = []
    for axis, n in enumerate(shape):
        i = index[axis] if axis < len(index) else slice(None)
        if isinstance(i, slice):
            lo, hi, step = i.indices(n)
            if step != 1:
                return None
            box.append((lo, max(lo, hi)))
        elif isinstance(i, int | np.integer) and -n <= i < n:
            lo = int(i) % n
            box.append((lo, lo + 1))
        else:
            return None
    return tuple(box)


def forget_kept() -> None:
    """Forget every kept description and plan (a new process's state: what a benchmark of a
    run's first uses starts from), down to the block shapes and the grids' tiles."""
    _DESCRIBED.clear()
    _PLANS.clear()
    from harness.cudnn import _regions

    for cached in (_grid_tiles, _grid_symbols, _kind_symbols, sym, _regions):
        cached.cache_clear()
    forget_shapes()


GEOMETRY = ("cell", "input_size", "hidden_size", "proj_size", "num_layers", "dir_mode",
            "peepholes", "reset_after")  # the case fields a description reads


def _cache_key(layout: Layout, case: Case) -> tuple:
    """(layout, the case's :data:`GEOMETRY`, whether it folds a forget bias): what a
    description and a conversion plan depend on, so cases of one model share them
    (tests/test_layout_cache.py checks that no other field changes a description)."""
    return (layout, *(getattr(case, name) for name in GEOMETRY), case.forget_bias != 0)


DIRECT_MAX_SIZE = 1 << 15  # native elements up to which to_native places the blocks one by one
# with no plan: working out a plan (a gather index, or runs) costs more than the few dozen
# placements it would save on a model converted once or twice, as a run converts them (3-4
# native elements: 50 -> 3 us to plan, 7 -> 15 us to convert; 9 k: 200 -> 7 us, 45 -> 55 us)


@dataclass(frozen=True)
class _Runs:
    """:meth:`Layout.to_native`, tensor by tensor (``tensors``: name and shape); a small case
    has no runs (:meth:`direct`). ``runs``: (tensor, lo, hi, keys), ranges [lo, hi) of a
    tensor's C-order elements that hold canonical blocks laid end to end, each in C order
    (blocks copied or C-order reshaped into a contiguous slice: all of torch's, ONNX's and
    cuDNN's weights), filled by one ``np.concatenate`` each; ``rest``: (tensor, placement) for
    the others (transposed, summed, folded or strided), placed one by one; ``whole``: the
    tensors one run fills, which ``shared`` natives view in the cast where its blocks lie so."""

    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    runs: tuple[tuple[int, int, int, tuple[str, ...]], ...]
    rest: tuple[tuple[int, Placement], ...]
    whole: tuple[tuple[int, tuple[str, ...]], ...] = ()  # (tensor, keys): one run fills it

    @classmethod
    def direct(cls, tensors: tuple[NativeTensor, ...]) -> _Runs:
        """Every placement placed one by one (no runs: nothing to work out)."""
        return cls(tuple((t.name, t.shape) for t in tensors), (),
                   tuple((k, pl) for k, t in enumerate(tensors) for pl in t.placements))

    def natives(self, canonical: Canonical, case: Case, dtype: type,
                shared: bool = False) -> dict[str, np.ndarray]:
        views: dict[int, np.ndarray] = {}
        if shared:  # a tensor that is one run of blocks lying so in the cast: a view of it
            for k, keys in self.whole:
                span = canonical.span(dtype, keys)
                if span is not None:
                    views[k] = span.reshape(self.tensors[k][1])
        arrays = [views[k] if k in views else np.empty(shape, dtype=dtype)
                  for k, (_, shape) in enumerate(self.tensors)]
        for k, lo, hi, keys in self.runs:
            if k not in views:
                np.concatenate(canonical.raveled(dtype, keys), out=arrays[k].reshape(-1)[lo:hi])
        if self.rest:
            cast = canonical.cast(dtype)
            later: list[tuple[np.ndarray, np.ndarray]] = []  # large transposes
            for k, pl in self.rest:
                dst = arrays[k][pl.index]
                if len(pl.sources) == 1 and not pl.fold_forget_bias:
                    value = cast[pl.sources[0]]
                else:
                    value = canonical[pl.sources[0]]
                    for s in pl.sources[1:]:
                        value = value + canonical[s]
                    if pl.fold_forget_bias:
                        value = value + case.forget_bias
                if pl.transform == "transpose" and value.size >= TRANSPOSE_MIN_SIZE:
                    later.append((dst, value))
                else:
                    dst[...] = _apply(pl.transform, value, dst.shape)
            _transpose_all(later)
        return {name: a for (name, _), a in zip(self.tensors, arrays, strict=True)}


_PLANS: dict[tuple, _Runs] = {}


def _plan(layout: Layout, case: Case) -> _Runs:
    """How :meth:`Layout.to_native` fills the case's natives, worked out once per layout and
    model (:func:`_cache_key`): up to :data:`DIRECT_MAX_SIZE` native elements, placement by
    placement; above, runs of blocks (:func:`_runs`)."""
    k = _cache_key(layout, case)
    plan = _PLANS.get(k)
    if plan is None:
        if len(_PLANS) > 1024:
            _PLANS.clear()
        tensors = _described(layout, case)
        plan = _PLANS[k] = (_Runs.direct(tensors)
                            if sum(math.prod(t.shape) for t in tensors) <= DIRECT_MAX_SIZE
                            else _runs(tensors, case))
    return plan


def _runs(tensors: tuple[NativeTensor, ...], case: Case) -> _Runs:
    """The placements whose block lands in C order on a contiguous slice (a forget bias of 0
    folded is a copy), merged into runs where they follow one another (:func:`_span_of`)."""
    sizes = {k: math.prod(v) for k, v in expected_shapes(case).items()}
    runs: list[tuple[int, int, int, tuple[str, ...]]] = []
    rest: list[tuple[int, Placement]] = []
    spans: dict[tuple[str, tuple[int, ...]], tuple[int, int] | None] = {}
    for k, t in enumerate(tensors):
        found: list[tuple[int, int, str]] = []  # (offset, size, canonical key)
        for pl in t.placements:
            if (len(pl.sources) != 1 or (pl.fold_forget_bias and case.forget_bias)
                    or pl.transform not in ("copy", "reshape")):
                span = None
            elif not pl.where:  # no symbolic index to know it by (hand-made placements)
                span = _span_of(pl.index, t.shape)
            else:  # one symbolic index in tensors of one shape: one span (layers, directions)
                where = (pl.where, t.shape)
                if where not in spans:
                    spans[where] = _span_of(pl.index, t.shape)
                span = spans[where]
            if span is not None and span[1] == sizes[pl.sources[0]]:
                found.append((*span, pl.sources[0]))
            else:
                rest.append((k, pl))
        first = len(runs)
        for offset, size, source in sorted(found):
            if len(runs) > first and runs[-1][2] == offset:
                _, lo, _, keys = runs[-1]
                runs[-1] = (k, lo, offset + size, (*keys, source))
            else:
                runs.append((k, offset, offset + size, (source,)))
    whole = [(k, keys) for k, lo, hi, keys in runs
             if lo == 0 and hi == math.prod(tensors[k].shape)]
    return _Runs(tuple((t.name, t.shape) for t in tensors), tuple(runs), tuple(rest),
                 tuple(whole))


def _span_of(index: tuple, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(first element, elements) of ``index`` into a C-order array of ``shape`` where what it
    selects is one contiguous range, else None: a box (:func:`_box`) whose axes after the
    first one it spans more than one index of are whole, and ``(...,)``."""
    if index == (...,):
        return 0, math.prod(shape)
    box = _box(index, shape)
    if box is None:
        return None
    size = math.prod(hi - lo for lo, hi in box)
    offset, stride, whole_after = 0, 1, True  # walking from the last axis
    for (lo, hi), n in zip(reversed(box), reversed(shape), strict=True):
        if hi - lo > 1 and not whole_after:
            return None
        whole_after = whole_after and (lo, hi) == (0, n)
        offset += lo * stride
        stride *= n
    return (offset, size) if size else None


def _apply(transform: str, value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if transform == "copy":
        return value
    if transform == "transpose":
        return value.T
    if transform == "reshape":
        return value.reshape(shape)
    raise AssertionError(transform)


def _transpose_all(jobs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """``dst[...] = src.T`` for each (dst, src) through the compiled tiled copy
    (:mod:`harness.layouts.transpose`, 2-3x faster than NumPy's on blocks of
    :data:`TRANSPOSE_MIN_SIZE` and up)."""
    from harness.layouts.transpose import transpose_into

    for dst, src in jobs:
        if not transpose_into(dst, src):
            dst[...] = src.T


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


@functools.cache
def _kind_symbols(D: int, projected: bool, first: bool, kind: str) -> tuple[Symbol, ...]:
    H = (0, 1, 0)
    out = (0, 0, 1) if projected else H
    in_l = (1, 0, 0) if first else (0, 0, D) if projected else (0, D, 0)
    return {"W": (H, in_l), "R": (H, out), "Wp": ((0, 0, 1), H)}.get(kind, (H,))


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
    the summed block containing it).
    """
    try:
        shape, laid, cover = _grid_tiles(
            (case.input_size, case.hidden_size, case.proj_size),
            (case.num_directions, bool(case.proj_size), layer == 0),
            tuple(map(tuple, rows)), transform, tuple(lead), tuple(lead_shape),
            fold_forget_bias, squeeze)
    except _Untiled as exc:
        raise AssertionError(f"{name}: {exc}") from None
    prefix = key(layer, direction, "")
    return NativeTensor(name, shape, tuple([
        Placement(index, tuple([prefix + n for n in names]), transform, fold, where)
        for index, names, fold, where in laid]), cover)


GridTile = tuple[tuple, tuple[str, ...], bool, str]  # index, NAMEs, folded, where


class _Untiled(Exception):
    """Rows that do not tile a rectangle (a layout's mistake; :func:`grid` names the tensor)."""


@functools.lru_cache(maxsize=4096)
def _grid_tiles(sizes: tuple[int, int, int], symbol_model: tuple,
                rows: tuple[tuple[Tile, ...], ...], transform: str, lead: tuple[int, ...],
                lead_shape: tuple[int, ...], fold_forget_bias: bool, squeeze: bool
                ) -> tuple[tuple[int, ...], tuple[GridTile, ...], tuple[Box]]:
    """:func:`grid` without the layer and direction, at ``sizes`` (I, H, P): its shape, tiles
    and cover (one box: its index on the leading axes, all of the others), the symbols of
    :func:`_grid_symbols` evaluated; kept per sizes and arguments (the layers past the first
    of a stack, both directions and models of the same sizes share it)."""
    shape, laid = _grid_symbols(symbol_model, rows, transform, lead, fold_forget_bias, squeeze)

    def at(s: Symbol) -> int:
        return s[0] * sizes[0] + s[1] * sizes[1] + s[2] * sizes[2]

    inner = tuple([n if type(n) is int else at(n) for n in shape])
    cover = (tuple([(i, i + 1) for i in lead] + [(0, n) for n in inner]),)
    return lead_shape + inner, tuple([
        (tuple([i if type(i) is int else slice(at(i[0]), at(i[1])) for i in index]), names,
         fold, where) for index, names, fold, where in laid]), cover


@functools.lru_cache(maxsize=1024)
def _grid_symbols(symbol_model: tuple, rows: tuple[tuple[Tile, ...], ...],
                  transform: str, lead: tuple[int, ...], fold_forget_bias: bool, squeeze: bool
                  ) -> tuple[tuple[Symbol | int, ...], tuple[GridTile, ...]]:
    """:func:`grid` with the sizes left symbolic (:data:`Symbol`, multiples of I, H, P), made
    once per kind of layer (``symbol_model``: directions, projected, first layer) and
    arguments, whatever the sizes: (shape after the leading axes, tiles with an index of ints
    and (start, stop) Symbol pairs for slices). Blocks of one row are of one height and rows of
    one width as symbols, so at any sizes: the tiles cover the shape, each element once
    (:attr:`NativeTensor.cover`)."""
    flip = transform in ("transpose", "reshape")  # the slice is [in, H]-shaped
    lead_where = "".join(f"{i}, " for i in lead)
    stacked = not (squeeze and len(rows) == 1)
    zero = (0, 0, 0)

    def tile_symbols(tile: Tile) -> tuple[Symbol, ...]:
        first = tile if isinstance(tile, str) else tile[0]
        y = _kind_symbols(*symbol_model, first.split("_")[0])
        return y[::-1] if flip else y

    laid = []
    one_d = len(tile_symbols(rows[0][0])) == 1
    row_sym, width = zero, None
    for r, row in enumerate(rows):
        col_sym, height = zero, None
        for tile in row:
            y = tile_symbols(tile)
            names = (tile,) if isinstance(tile, str) else tuple(tile)
            if one_d:
                end_sym = _plus(col_sym, y[0])
                idx = ((r,) if stacked else ()) + ((col_sym, end_sym),)
                where = (f"{r}, " if stacked else "") + f"{sym(col_sym)}:{sym(end_sym)}"
            else:
                if height not in (None, y[0]):
                    raise _Untiled("blocks of unequal height in a row")
                height = y[0]
                end_sym = _plus(col_sym, y[1])
                idx = ((row_sym, _plus(row_sym, y[0])), (col_sym, end_sym))
                rs = ":" if len(rows) == 1 else f"{sym(row_sym)}:{sym(_plus(row_sym, y[0]))}"
                cs = ":" if len(row) == 1 else f"{sym(col_sym)}:{sym(end_sym)}"
                where = f"{rs}, {cs}"
            col_sym = end_sym
            laid.append((lead + idx, names, fold_forget_bias and "bW_f" in names,
                         f"[{lead_where}{where}]"))
        if width not in (None, col_sym):
            raise _Untiled("rows of unequal width")
        width = col_sym
        if not one_d:
            row_sym = _plus(row_sym, height)
    if one_d:
        shape = (width,) if not stacked else (len(rows), width)
    else:
        shape = (row_sym, width)
    return shape, tuple(laid)


def fused(case: Case, layer: int, direction: int, name: str, kind: str | tuple[str, ...],
          order: Sequence[str], **kw) -> NativeTensor:
    """Gate blocks of one kind side by side: ``fused(..., "W", "ifgo")`` is ``[W_i W_f W_g W_o]``
    along the last axis (after ``transform``); rows instead with ``axis=0``."""
    axis = kw.pop("axis", -1)
    kinds = (kind,) if isinstance(kind, str) else kind
    tiles = [tuple(f"{k}_{g}" for k in kinds) if len(kinds) > 1 else f"{kinds[0]}_{g}"
             for g in order]
    if axis == 0 and len(_kind_symbols(1, False, True, kinds[0])) == 2:  # matrices
        return grid(case, layer, direction, name, [[t] for t in tiles], **kw)
    return grid(case, layer, direction, name, [tiles], **kw)
