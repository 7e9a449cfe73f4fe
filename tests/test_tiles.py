"""The tiling check of layout descriptions (``harness.layouts.base.tiles``): every native
element placed exactly once. Large tensors are checked on the coarse grid of the placements' own
edges instead of element by element; both ways must agree on every placement set, tilings,
overlaps, holes, clipped and negative indices included."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.layouts import LAYOUTS, base
from harness.layouts.base import NativeTensor, Placement, tiles
from harness.spec import Case


def counted(shape: tuple[int, ...], indices: list[tuple]) -> bool:
    """Element by element, written here: each element covered exactly once."""
    covered = np.zeros(shape, dtype=np.int64)
    for index in indices:
        covered[index] += 1
    return bool((covered == 1).all())


def tensor(shape: tuple[int, ...], indices: list[tuple]) -> NativeTensor:
    return NativeTensor("t", shape, tuple(Placement(index=i, sources=("x",)) for i in indices))


@st.composite
def placement_sets(draw):
    """A shape and indices into it: unit slices (clipped, negative, open), ints (negative
    too), a few stepped slices; often a true tiling split at random cuts."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    if draw(st.booleans()):  # a tiling: every axis cut at random points, one box a cell
        cuts = [sorted({0, n, *draw(st.lists(st.integers(0, n), max_size=3))}) for n in shape]
        cells = np.stack(np.meshgrid(*[np.arange(len(c) - 1) for c in cuts], indexing="ij"),
                         -1).reshape(-1, ndim)
        indices = [tuple(slice(c[k], c[k + 1]) for c, k in zip(cuts, cell, strict=True))
                   for cell in cells]
        if draw(st.booleans()) and len(indices) > 1:  # break it: drop or repeat one
            k = draw(st.integers(0, len(indices) - 1))
            indices = (indices[:k] + indices[k + 1:] if draw(st.booleans())
                       else indices + [indices[k]])
        return shape, indices

    def one_axis(n: int):
        return st.one_of(
            st.builds(slice, st.integers(-n - 2, n + 2) | st.none(),
                      st.integers(-n - 2, n + 2) | st.none()),
            st.integers(-n, n - 1),
            st.builds(slice, st.none(), st.none(), st.sampled_from([2, -1])),
        )

    index = st.integers(1, ndim).flatmap(
        lambda k: st.tuples(*[one_axis(n) for n in shape[:k]]))
    return shape, draw(st.lists(index, min_size=1, max_size=6))


@settings(max_examples=400, deadline=None)
@given(placement_sets())
def test_the_coarse_grid_counts_what_the_elements_count(drawn):
    shape, indices = drawn
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base, "DENSE_TILE_CHECK", 0)  # every tensor on the coarse grid
        assert tiles(tensor(shape, indices)) == counted(shape, indices), (shape, indices)


def test_small_tensors_are_counted_element_by_element(monkeypatch):
    boxes = []
    monkeypatch.setattr(base, "_box", lambda index, shape: boxes.append(index))
    assert tiles(tensor((2, 3), [(0,), (1,)]))
    assert boxes == []


def test_a_large_overlap_or_hole_is_found():
    n = base.DENSE_TILE_CHECK + 8  # above the dense check: the coarse grid decides
    whole = [(slice(0, 8),), (slice(8, n),)]
    assert tiles(tensor((n,), whole))
    assert not tiles(tensor((n,), [(slice(0, 8),), (slice(7, n),)]))  # one element twice
    assert not tiles(tensor((n,), [(slice(0, 8),), (slice(9, n),)]))  # one element never
    assert not tiles(tensor((n, 2), [(slice(0, n), 0)]))  # a column never


SEED000 = Case(name="big", cell="lstm", input_size=120, hidden_size=320, num_layers=5,
               bidirectional=True, batch=2, seq_len=3, dtype="float32")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_tiles_seed000s_model_on_the_coarse_grid(layout):
    """Seed 000's model (its tensors above the dense check) through every layout: the same
    verdict (every tensor tiled) as counting its 11 M elements one by one."""
    base.forget_kept()
    tensors = LAYOUTS[layout].tensors(SEED000)
    assert any(np.prod(t.shape) > base.DENSE_TILE_CHECK for t in tensors)
    for t in tensors:
        assert tiles(t)
        assert counted(t.shape, [pl.index for pl in t.placements])


# Geometries every layout is described at below: the suite's models and a few more (peepholes,
# projection, reverse, GRU reset-before, I = H, sizes of 1).
GEOMETRIES = [
    dict(cell="lstm", input_size=3, hidden_size=4),
    dict(cell="lstm", input_size=4, hidden_size=4, num_layers=3, bidirectional=True),
    dict(cell="lstm", input_size=5, hidden_size=6, num_layers=2, direction="reverse"),
    dict(cell="lstm", input_size=5, hidden_size=6, proj_size=3, num_layers=2,
         bidirectional=True),
    dict(cell="lstm", input_size=2, hidden_size=5, peepholes=True, num_layers=2),
    dict(cell="lstm", input_size=1, hidden_size=1),
    dict(cell="gru", input_size=3, hidden_size=4, num_layers=2, bidirectional=True),
    dict(cell="gru", input_size=7, hidden_size=2, reset_after=False),
]


def _described(layout, fields):
    base.forget_kept()
    case = Case(name="g", batch=2, seq_len=3, dtype="float32", **fields)
    if case.cell not in LAYOUTS[layout].cells:
        return []
    try:
        return LAYOUTS[layout].tensors(case)
    except Exception:  # a model the layout cannot hold (cuDNN: peepholes, ...)
        return []


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_what_a_cover_claims_is_counted_on_the_elements(layout):
    """A tensor with a ``cover`` is checked on its boxes only (its builder's construction tiles
    each box); here its placements are counted element by element, with a dozen geometries:
    they place every element once, and each placement lies in one of the boxes."""
    seen = 0
    for fields in GEOMETRIES:
        for t in _described(layout, fields):
            assert counted(t.shape, [pl.index for pl in t.placements]), (layout, fields, t.name)
            if t.cover is None:
                continue
            seen += 1
            for pl in t.placements:
                box = (tuple((0, n) for n in t.shape) if pl.index == (...,)
                       else base._box(pl.index, t.shape))
                assert box is not None and any(
                    all(lo <= b_lo and b_hi <= hi for (lo, hi), (b_lo, b_hi)
                        in zip(c, box, strict=True)) for c in t.cover), (t.name, pl.index)
    assert seen or layout == "tf-cudnn-params"  # its flat buffer is checked per placement


def test_covers_that_overlap_or_leave_a_hole_do_not_tile():
    """A layout that puts one direction twice on ONNX's direction axis, or forgets one: its
    boxes overlap, or leave a slab empty."""
    full = ((0, 4), (0, 3))
    assert base.boxes_tile([((0, 1),) + full, ((1, 2),) + full], (2, 4, 3))
    assert not base.boxes_tile([((0, 1),) + full, ((0, 1),) + full], (2, 4, 3))
    assert not base.boxes_tile([((0, 1),) + full], (2, 4, 3))
    assert not base.boxes_tile([((1, 3),) + full, ((0, 1),) + full], (2, 4, 3))  # outside
    assert not base.boxes_tile([((0, 2), (0, 4), (0, 2)), ((0, 2), (0, 4), (1, 3))], (2, 4, 3))


def test_a_merged_tensor_with_a_direction_twice_is_refused():
    """Through ``_described``: ONNX's W with both directions at index 0 of its direction
    axis (each direction's grid tiles its own slab; the slabs overlap)."""
    wrong = base.Layout(name="onnx-wrong", title="", cells=("lstm",),
                        describe=lambda case, layer, d: [base.fused(
                            case, layer, d, "W", "W", "iofg", axis=0, lead=(0,),
                            lead_shape=(2,))])
    case = Case(name="w", cell="lstm", input_size=3, hidden_size=4, bidirectional=True,
                batch=2, seq_len=3)
    with pytest.raises(AssertionError, match="do not tile"):
        wrong.tensors(case)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_slice_has_its_blocks_shape(layout):
    """Placements are worked out from symbolic sizes (``_grid_symbols``): at each geometry the
    slice a placement names has the shape of its blocks (``params.block_shapes``), transposed
    for ``transpose``, the same number of elements for ``reshape`` (no broadcasting)."""
    from harness.params import expected_shapes

    for fields in GEOMETRIES:
        tensors = _described(layout, fields)
        if not tensors:
            continue
        shapes = expected_shapes(Case(name="g", batch=2, seq_len=3, **fields))
        for t in tensors:
            probe = np.empty(t.shape, dtype=np.int8)
            for pl in t.placements:
                got = probe[pl.index].shape
                for s in pl.sources:
                    want = shapes[s]
                    if pl.transform == "transpose":
                        assert got == want[::-1], (layout, fields, t.name, s)
                    elif pl.transform == "reshape":
                        assert math.prod(got) == math.prod(want), (layout, fields, t.name, s)
                    else:
                        assert got == want, (layout, fields, t.name, s)


@settings(max_examples=400, deadline=None)
@given(placement_sets())
def test_a_contiguous_span_is_what_numpy_selects(drawn):
    """``_span_of`` (conversion runs, worked out from the index) against the view NumPy makes
    of a C-order array: contiguous and non-empty exactly when a span is found, at the offset
    and of the size of the view."""
    shape, indices = drawn
    probe = np.empty(shape, dtype=np.int8)
    origin = probe.__array_interface__["data"][0]
    for index in indices:
        view = probe[(*index, ...)]  # a view, also where every axis is an int
        want = ((view.__array_interface__["data"][0] - origin, view.size)
                if view.size and view.flags.c_contiguous and base._box(index, shape) else None)
        assert base._span_of(index, shape) == want, (shape, index)
