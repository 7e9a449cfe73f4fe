"""The tiling check of layout descriptions (``harness.layouts.base.tiles``): every native
element placed exactly once. It works on the placements' boxes; counting element by element
must give the same verdict on every set of placements, tilings, overlaps, holes, clipped and
negative indices included, and on every layout's tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.layouts import LAYOUTS, base
from harness.layouts.base import NativeTensor, Placement, tiles
from harness.params import expected_shapes
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
    """A shape and indices into it: unit slices (clipped, negative, open) and ints (negative
    too); often a true tiling split at random cuts, sometimes broken."""
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
        )

    index = st.integers(1, ndim).flatmap(
        lambda k: st.tuples(*[one_axis(n) for n in shape[:k]]))
    return shape, draw(st.lists(index, min_size=1, max_size=6))


@settings(max_examples=400, deadline=None)
@given(placement_sets())
def test_the_boxes_say_what_counting_the_elements_says(drawn):
    shape, indices = drawn
    assert tiles(tensor(shape, indices)) == counted(shape, indices), (shape, indices)


def test_an_overlap_or_a_hole_is_found():
    n = 1000
    assert tiles(tensor((n,), [(slice(0, 8),), (slice(8, n),)]))
    assert tiles(tensor((2, n), [(0,), (1, ...)]))
    assert not tiles(tensor((n,), [(slice(0, 8),), (slice(7, n),)]))  # one element twice
    assert not tiles(tensor((n,), [(slice(0, 8),), (slice(9, n),)]))  # one element never
    assert not tiles(tensor((n, 2), [(slice(0, n), 0)]))  # a column never
    assert not tiles(tensor((2, 3), [(0,), (0,)]))  # a row twice, the other never


def test_an_index_that_is_no_box_is_refused():
    with pytest.raises(ValueError, match="step"):
        tiles(tensor((4,), [(slice(None, None, 2),), (slice(1, None, 2),)]))


SEED000 = Case(name="big", cell="lstm", input_size=120, hidden_size=320, num_layers=5,
               bidirectional=True, batch=2, seq_len=3, dtype="float32")

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


def described(layout: str, case: Case) -> list[NativeTensor]:
    """The layout's tensors of the case, none where the layout holds no such cell (TF's block
    LSTM layouts hold no GRU). Any error describing the case fails the test."""
    if case.cell not in LAYOUTS[layout].cells:
        return []
    return LAYOUTS[layout].tensors(case)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_places_every_element_once(layout):
    """Counted element by element, at a dozen geometries and on seed 000's model."""
    cases = [Case(name="g", batch=2, seq_len=3, **fields) for fields in GEOMETRIES] + [SEED000]
    seen = 0
    for case in cases:
        for t in described(layout, case):
            seen += 1
            assert counted(t.shape, [pl.index for pl in t.placements]), (layout, case, t.name)
    assert seen, f"{layout}: no tensor described at any geometry"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_slice_has_its_blocks_shape(layout):
    """At each geometry the slice a placement names has the shape of its blocks
    (``params.expected_shapes``), transposed for ``transpose``, the same number of elements
    for ``reshape`` (no broadcasting)."""
    seen = 0
    for fields in GEOMETRIES:
        case = Case(name="g", batch=2, seq_len=3, **fields)
        shapes = expected_shapes(case)
        for t in described(layout, case):
            probe = np.empty(t.shape, dtype=np.int8)
            for pl in t.placements:
                got = probe[pl.index].shape
                for s in pl.sources:
                    seen += 1
                    want = shapes[s]
                    if pl.transform == "transpose":
                        assert got == want[::-1], (layout, fields, t.name, s)
                    elif pl.transform == "reshape":
                        assert math.prod(got) == math.prod(want), (layout, fields, t.name, s)
                    else:
                        assert got == want, (layout, fields, t.name, s)
    assert seen, f"{layout}: no placement checked at any geometry"


def test_a_merged_tensor_with_a_direction_twice_is_refused():
    """ONNX's W with both directions at index 0 of its direction axis: each direction's grid
    tiles its own slab; merged, the slabs overlap and the other one is empty."""
    wrong = base.Layout(name="onnx-wrong", title="", cells=("lstm",),
                        describe=lambda case, layer, d: [base.fused(
                            case, layer, d, "W", "W", "iofg", axis=0, lead=(0,),
                            lead_shape=(2,))])
    case = Case(name="w", cell="lstm", input_size=3, hidden_size=4, bidirectional=True,
                batch=2, seq_len=3)
    with pytest.raises(AssertionError, match="do not tile"):
        wrong.tensors(case)


def test_rows_of_unequal_widths_are_refused():
    """A grid whose second row is narrower than the first (a gate missing): a hole."""
    wrong = base.Layout(name="legacy-wrong", title="", cells=("lstm",),
                        describe=lambda case, layer, d: [base.grid(
                            case, layer, d, "kernel", [["W_i", "W_f"], ["R_i"]],
                            transform="transpose")])
    case = Case(name="w", cell="lstm", input_size=3, hidden_size=4, batch=2, seq_len=3)
    with pytest.raises(AssertionError, match="do not tile"):
        wrong.tensors(case)
