"""The arena a large case's natives are carved from (``harness.layouts.base._Arena``): reused
by the next conversion only when nothing refers to the last one's natives any more, so natives
a caller keeps are never overwritten."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from harness.layouts import base, get_layout
from harness.params import generate
from harness.spec import Case

LARGE = dict(cell="lstm", input_size=96, hidden_size=256, num_layers=2, bidirectional=True,
             batch=2, seq_len=3, dtype="float32")  # ~2.6 M float32 natives: above the minimum


def convert(layout: str, seed: int) -> tuple[Case, dict[str, np.ndarray]]:
    case = Case(name=f"s{seed}", seed=seed, **LARGE)
    canonical = generate(case)
    return case, get_layout(layout).to_native(canonical, case, np.float32, shared=True)


def expected(layout: str, seed: int) -> dict[str, np.ndarray]:
    case = Case(name=f"s{seed}", seed=seed, **LARGE)
    return get_layout(layout).to_native(generate(case), case, np.float32)  # not shared


@pytest.fixture(autouse=True)
def fresh_arena():
    base.forget_kept()
    yield
    base.forget_kept()


def test_the_case_is_large_enough_to_use_the_arena():
    _, natives = convert("keras", 1)
    assert sum(a.nbytes for a in natives.values()) >= base.ARENA_MIN_BYTES
    kept = base._ARENA.kept[np.dtype(np.float32)]
    assert all(np.shares_memory(a, kept) for a in natives.values())


@pytest.mark.parametrize("layout", ["keras", "onnx", "tf-block"])
def test_natives_dropped_are_carved_again_from_the_same_memory(layout):
    _, natives = convert(layout, 1)
    first = weakref.ref(base._ARENA.kept[np.dtype(np.float32)])  # no reference of its own
    del natives
    _, natives = convert(layout, 2)
    assert base._ARENA.kept[np.dtype(np.float32)] is first()
    for name, want in expected(layout, 2).items():
        np.testing.assert_array_equal(natives[name], want, err_msg=name)


@pytest.mark.parametrize("keep", ["all", "one view"])
def test_natives_still_referenced_are_never_overwritten(keep):
    _, natives = convert("keras", 1)
    held = natives if keep == "all" else {"x": next(iter(natives.values()))[:2]}
    before = {k: v.copy() for k, v in held.items()}
    del natives
    _, other = convert("keras", 2)  # another model's weights, same shapes
    for k, v in held.items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert not any(np.shares_memory(a, b) for a in held.values() for b in other.values())
    for name, want in expected("keras", 2).items():
        np.testing.assert_array_equal(other[name], want, err_msg=name)


def test_unshared_conversions_never_use_the_arena():
    case = Case(name="s1", seed=1, **LARGE)
    get_layout("keras").to_native(generate(case), case, np.float32)
    assert base._ARENA.kept == {}
