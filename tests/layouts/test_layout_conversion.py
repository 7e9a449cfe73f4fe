"""Every layout's conversions at several geometries: canonical -> native -> canonical exactly
(float64), natives in a lower dtype rounded once from the float64 ones, and the gradients'
conversion the adjoint of ``to_native``."""

from __future__ import annotations

import numpy as np
import pytest

from harness.layouts import LAYOUTS
from harness.params import Canonical, expected_shapes, generate
from harness.spec import Case

GEOMETRIES = {
    "lstm": dict(cell="lstm", input_size=3, hidden_size=4),
    "lstm-bi3": dict(cell="lstm", input_size=4, hidden_size=4, num_layers=3,
                     bidirectional=True),
    "lstm-reverse2": dict(cell="lstm", input_size=5, hidden_size=6, num_layers=2,
                          direction="reverse"),
    "lstm-proj-bi2": dict(cell="lstm", input_size=5, hidden_size=6, proj_size=3, num_layers=2,
                          bidirectional=True),
    "lstm-peep2-forget": dict(cell="lstm", input_size=2, hidden_size=5, peepholes=True,
                              num_layers=2, forget_bias=1.0),
    "lstm-forget-bi": dict(cell="lstm", input_size=3, hidden_size=2, bidirectional=True,
                           forget_bias=-0.5),
    "lstm-1x1": dict(cell="lstm", input_size=1, hidden_size=1),
    "gru-after-bi2": dict(cell="gru", input_size=3, hidden_size=4, num_layers=2,
                          bidirectional=True),
    "gru-before": dict(cell="gru", input_size=7, hidden_size=2, reset_after=False),
    "gru-before-bi3": dict(cell="gru", input_size=2, hidden_size=3, reset_after=False,
                           num_layers=3, bidirectional=True),
}


def geometry(layout: str, name: str) -> Case | None:
    """The case of geometry ``name``, or None where ``layout`` cannot hold it (no such cell, or
    a tensor it has no place for: Keras a projection, torch peepholes, ...)."""
    lay = LAYOUTS[layout]
    case = Case(name=name, batch=1, seq_len=2, dtype="float64", **GEOMETRIES[name])
    if case.cell not in lay.cells:
        return None
    placed = {s for t in lay.tensors(case) for pl in t.placements for s in pl.sources}
    return None if set(expected_shapes(case)) - placed else case


def held(names) -> list:  # noqa: ANN001
    """(layout, geometry) for each geometry of ``names`` each layout holds: a model a layout
    cannot hold is no test of it, rather than a skipped one."""
    return [pytest.param(layout, name, id=f"{layout}-{name}")
            for layout in sorted(LAYOUTS) for name in names if geometry(layout, name)]


def test_every_layout_holds_most_geometries():
    """The pairs left out are few: each layout holds the plain LSTM and most of the others."""
    for layout in LAYOUTS:
        holds = [name for name in GEOMETRIES if geometry(layout, name)]
        assert "lstm" in holds and len(holds) >= len(GEOMETRIES) // 2, (layout, holds)


def summed_in(layout: str, case: Case) -> Canonical:
    """What ``from_native`` can give back: a block summed with others into one slice holds
    the sum, the others zero. Multiples of 2^-12, so that sums and a folded forget bias added
    and taken back are exact."""
    canonical = Canonical({k: np.round(v * 4096) / 4096 for k, v in generate(case).tensors.items()})
    out = dict(canonical.tensors)
    for t in LAYOUTS[layout].tensors(case):
        for pl in t.placements:
            first, *rest = pl.sources
            out[first] = sum(canonical[s] for s in pl.sources)
            out.update({s: np.zeros_like(canonical[s]) for s in rest})
    return Canonical(out)


@pytest.mark.parametrize("layout, name", held(GEOMETRIES))
def test_canonical_native_canonical_is_exact(layout, name):
    """Float64 natives read back to the same canonical tensors, bit for bit (summed blocks:
    their sum in the first, zero in the others, which converts to the same natives)."""
    case = geometry(layout, name)
    lay = LAYOUTS[layout]
    canonical = summed_in(layout, case)
    native = lay.to_native(canonical, case)
    assert set(native) == {t.name for t in lay.tensors(case)}
    for t in lay.tensors(case):
        assert native[t.name].shape == t.shape and native[t.name].dtype == np.float64
    back = lay.from_native(native, case)
    assert set(back.tensors) == set(canonical.tensors)
    for k, v in canonical.tensors.items():
        assert back[k].tobytes() == v.tobytes(), k
    again = lay.to_native(back, case)
    for k, v in native.items():
        assert again[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("layout, name", held(["lstm-bi3", "lstm-peep2-forget",
                                               "gru-before-bi3"]))
def test_natives_in_a_lower_dtype_are_the_float64_ones_rounded_once(layout, name, dtype):
    """A summed or folded block is added up in float64 and rounded where it is stored."""
    case = geometry(layout, name)
    lay = LAYOUTS[layout]
    canonical = generate(case)
    want = lay.to_native(canonical, case)
    got = lay.to_native(canonical, case, dtype)
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == dtype, k
        np.testing.assert_array_equal(got[k], v.astype(dtype), err_msg=k)


@pytest.mark.parametrize("layout, name", held(GEOMETRIES))
def test_gradients_move_back_as_the_adjoint_of_to_native(layout, name):
    """<to_native(c) - to_native(0), g> = <c, grads_from_native(g)> for random c and native
    gradients g (the folded forget bias, a constant, drops out)."""
    case = geometry(layout, name)
    lay = LAYOUTS[layout]
    rng = np.random.default_rng(0)
    c = Canonical({k: rng.standard_normal(v.shape) for k, v in generate(case).tensors.items()})
    zero = Canonical({k: np.zeros_like(v) for k, v in c.tensors.items()})
    shapes = lay.shapes(case)
    g = {n: rng.standard_normal(s) for n, s in shapes.items()}
    native, offset = lay.to_native(c, case), lay.to_native(zero, case)
    lhs = sum(float(np.sum((native[n] - offset[n]) * g[n])) for n in shapes)
    grads = lay.grads_from_native(g, case)
    assert set(grads.tensors) == set(c.tensors)
    rhs = sum(float(np.sum(c[k] * grads[k])) for k in c.tensors)
    assert lhs == pytest.approx(rhs, rel=1e-12, abs=1e-12)


def test_a_folded_forget_bias_is_stored_and_taken_back():
    """torch: bias_ih's f block holds bW_f + forget_bias; reading it back subtracts it."""
    case = Case(name="f", cell="lstm", input_size=2, hidden_size=3, forget_bias=1.0,
                batch=1, seq_len=2, dtype="float64")
    canonical = generate(case)
    lay = LAYOUTS["torch"]
    native = lay.to_native(canonical, case)
    np.testing.assert_array_equal(native["bias_ih_l0"][3:6],
                                  canonical["layer0/forward/bW_f"] + 1.0)
    np.testing.assert_array_equal(native["bias_hh_l0"][3:6], canonical["layer0/forward/bR_f"])
    back = lay.from_native(native, case)
    np.testing.assert_array_equal(back["layer0/forward/bW_f"],
                                  (canonical["layer0/forward/bW_f"] + 1.0) - 1.0)
