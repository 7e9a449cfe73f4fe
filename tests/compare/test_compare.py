"""Divergence metrics on hand-made outputs: rows, hand-computed values, ULPs in each dtype,
relative error at zero, non-finite values, and the one verdict rule everything uses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness import compare, judges
from harness.compare import (
    DIVERGED,
    PASS,
    Tolerance,
    divergence,
    first_divergence,
    tol_ratios,
    tolerance_for,
    verdict,
    within,
)
from harness.data import Outputs
from harness.spec import Case


def case(**kw):
    base = dict(name="c", cell="lstm", input_size=2, hidden_size=2, batch=1, seq_len=3,
                num_layers=2, bidirectional=True, dtype="float32")
    return Case(**{**base, **kw})


def outputs(c, fill=0.5):
    return Outputs(y=np.full((1, 3, 4), fill), h_n=np.full((4, 1, 2), fill),
                   c_n=np.full((4, 1, 2), fill))


def one_layer(dtype="float32", batch=1):
    c = case(num_layers=1, bidirectional=False, dtype=dtype, batch=batch)
    ones = Outputs(y=np.ones((batch, 3, 2)), h_n=np.ones((1, batch, 2)),
                   c_n=np.ones((1, batch, 2)))
    return c, ones


def test_rows_per_output_layer_direction_t():
    c = case()
    ref = outputs(c)
    df = divergence(c, "a", outputs(c), ref, Tolerance(1e-5, 0)).rows
    # y: last layer only (no y_layers), 2 directions x 3 steps; h_n, c_n: 2 layers x 2 directions
    assert len(df) == 6 + 4 + 4
    assert list(df.columns) == compare.COLUMNS
    assert (df["verdict"] == PASS).all() and (df["max_abs"] == 0).all()
    y = df[df.output == "y"]
    assert list(zip(y.direction, y.t, strict=True)) == [(d, t) for d in (0, 1) for t in range(3)]
    h = df[df.output == "h_n"]
    assert list(zip(h.layer, h.direction, strict=True)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert h["t"].isna().all()


def test_hand_computed_metrics_of_one_row():
    """y at t=0 over a batch of 2: r = [1, 1], a = [1 + 2^-20, 1 - 2^-21] in float32."""
    c, ref = one_layer(batch=2)
    out = Outputs(y=ref.y.copy(), h_n=ref.h_n, c_n=ref.c_n)
    out.y[0, 0, 0] += 2.0**-20
    out.y[1, 0, 1] -= 2.0**-21
    row = divergence(c, "a", out, ref, Tolerance(2.0**-22, 2.0**-22)).rows.iloc[0]
    assert (row.output, row.t) == ("y", 0)
    assert row.max_abs == 2.0**-20
    assert row.mean_abs == (2.0**-20 + 2.0**-21) / 4  # over batch x features
    assert row.max_rel == 2.0**-20
    assert row.max_ulp == 8.0  # float32's spacing at 1 is 2^-23
    assert row.tol_ratio == 2.0**-20 / (2.0**-22 + 2.0**-22)  # 2: beyond tolerance
    assert row.verdict == DIVERGED
    assert np.isnan(row.noise_floor) and np.isnan(row.floor_ratio)  # no floor given


def test_tol_ratio_counts_an_exact_element_as_zero_even_with_no_tolerance():
    r = np.array([0.0, 0.0, 2.0, -4.0])
    a = np.array([0.0, 1e-30, 2.0, -3.0])
    got = tol_ratios(a, r, Tolerance(0.0, 0.5))
    assert got.tolist() == [0.0, np.inf, 0.0, 0.5]
    assert tol_ratios(a, r, Tolerance(2.0**-100, 0.0)).tolist() == [0.0, 1e-30 * 2.0**100, 0.0,
                                                                   2.0**100]
    # the same rule in the rows: exact at r = 0 with atol = 0 passes, 1e-30 off does not
    c, ref = one_layer()
    ref.y[...] = 0.0
    rows = divergence(c, "a", Outputs(y=ref.y.copy(), h_n=ref.h_n, c_n=ref.c_n), ref,
                      Tolerance(0.0, 0.0)).rows
    assert (rows["tol_ratio"] == 0).all() and (rows["verdict"] == PASS).all()
    off = Outputs(y=ref.y.copy(), h_n=ref.h_n, c_n=ref.c_n)
    off.y[0, 1, 0] = 1e-30
    rows = divergence(c, "a", off, ref, Tolerance(0.0, 0.0)).rows
    assert np.isinf(rows.loc[(rows.output == "y") & (rows.t == 1), "tol_ratio"]).all()
    assert rows.loc[rows.verdict == DIVERGED, "t"].tolist() == [1]


@pytest.mark.parametrize("dtype,spacing", [("float32", 2.0**-23), ("float16", 2.0**-10),
                                           ("bfloat16", 2.0**-7), ("float64", 2.0**-52)])
def test_ulp_is_the_case_dtypes_spacing_at_the_reference(dtype, spacing):
    c, ref = one_layer(dtype)
    ref.h_n[...] = [[[1.0, 3.0]]]  # spacing at 3: twice that at 1
    out = Outputs(y=ref.y, h_n=ref.h_n + [[[spacing, 2 * spacing]]], c_n=ref.c_n)
    rows = divergence(c, "a", out, ref, Tolerance(1.0, 0.0)).rows
    h = rows[rows.output == "h_n"].iloc[0]
    assert h["max_ulp"] == 1.0
    # below the smallest normal of the format: the spacing of its smallest normals
    tiny = 2.0 ** {"float32": -126, "float16": -14, "bfloat16": -126, "float64": -1022}[dtype]
    ref.c_n[...] = 0.0
    out = Outputs(y=ref.y, h_n=ref.h_n, c_n=np.full((1, 1, 2), tiny * spacing))
    rows = divergence(c, "a", out, ref, Tolerance(1.0, 0.0)).rows
    assert rows[rows.output == "c_n"]["max_ulp"].tolist() == [1.0]


def test_ulp_and_relative_error_at_zero_are_finite():
    c = case(num_layers=1, bidirectional=False)
    ref = Outputs(y=np.zeros((1, 3, 2)), h_n=np.ones((1, 1, 2)), c_n=np.ones((1, 1, 2)))
    out = Outputs(y=np.zeros((1, 3, 2)), h_n=np.ones((1, 1, 2)) + 2.0**-23, c_n=np.ones((1, 1, 2)))
    out.y[0, 0, 0] = 1e-9
    df = divergence(c, "a", out, ref, Tolerance(1e-5, 0)).rows
    h = df[df.output == "h_n"].iloc[0]
    assert h["max_ulp"] == 1.0  # one float32 ulp at 1.0
    y0 = df[(df.output == "y") & (df.t == 0)].iloc[0]
    assert np.isfinite(y0["max_rel"]) and y0["max_rel"] == 1e-9 / 2.0**-23


def test_non_finite_outputs_never_pass():
    """NaN compares as beyond any tolerance, Inf as infinitely far (the runner turns both into
    an error row before comparing: ``test_adapter_faults.py``)."""
    c, ref = one_layer()
    nan = Outputs(y=ref.y.copy(), h_n=ref.h_n, c_n=ref.c_n)
    nan.y[0, 2, 1] = np.nan
    d = divergence(c, "a", nan, ref, Tolerance(1.0, 1.0))
    assert not d.passed and d.verdict == DIVERGED
    bad = d.rows[d.rows.verdict == DIVERGED]
    assert (bad.output.tolist(), bad.t.tolist()) == (["y"], [2])
    assert np.isnan(bad["tol_ratio"]).all() and np.isnan(bad["max_abs"]).all()
    inf = Outputs(y=ref.y, h_n=ref.h_n, c_n=np.full((1, 1, 2), np.inf))
    d = divergence(c, "a", inf, ref, Tolerance(1.0, 1.0))
    assert np.isinf(d.rows.loc[d.rows.output == "c_n", "tol_ratio"]).all() and not d.passed


def test_non_finite_adapter_output_is_an_error_with_its_reason():
    from harness.adapters.base import Adapter
    from harness.adapters.reference import EVERYTHING
    from harness.pairs import run_pair
    from harness.prepare import prepare

    class HalfNaN(Adapter):
        name = "half-nan"
        capabilities = EVERYTHING

        def _run(self, case, native, inputs):
            out = prep.reference
            h_n = out.h_n.copy()
            h_n[..., 0] = np.nan  # one per sequence
            return Outputs(y=out.y, h_n=h_n, c_n=out.c_n)

    prep = prepare(Case(name="n", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=2))
    r = run_pair(prep, HalfNaN())
    assert r.status == compare.ERROR and r.rows is None
    assert r.reason == "AdapterFault: returned 2 non-finite value(s) in h_n"


def test_the_verdict_rule():
    assert within(1.0) and within(0.0) and not within(np.nextafter(1.0, 2.0))
    assert not within(np.nan) and not within(np.inf)
    assert within(np.array([0.5, 1.0, 1.5])).tolist() == [True, True, False]
    assert verdict([0.2, 1.0]) == PASS and verdict([0.2, 1.01]) == DIVERGED
    assert verdict([]) == PASS and verdict([np.nan]) == DIVERGED


@pytest.mark.parametrize("off,want", [(0.0, PASS), (2.0**-17, PASS),
                                      (2.0**-17 + 2.0**-40, DIVERGED)])
def test_a_pairs_verdict_is_the_rule_over_its_rows(off, want):
    """Exactly at the tolerance passes, a hair beyond it does not."""
    c = case()
    ref, out = outputs(c), outputs(c)
    out.c_n[3, 0, 1] = 0.5 + off
    d = divergence(c, "a", out, ref, Tolerance(2.0**-17, 0))
    assert d.verdict == want and d.passed == (want == PASS)
    assert d.rows["verdict"].tolist() == np.where(within(d.rows["tol_ratio"]), PASS,
                                                   DIVERGED).tolist()


@pytest.mark.parametrize("off,factor,want", [
    (2.0**-16, 8.0, PASS),  # 4x atol, 2x the floor: the floor explains it
    (2.0**-16, None, DIVERGED),  # the same error without the floor rule (a case's own tolerance)
    (2.0**-14, 8.0, PASS),  # exactly 8 floors
    (2.0**-14 + 2.0**-30, 8.0, DIVERGED),  # a hair beyond
])
def test_a_row_within_k_floors_passes(off, factor, want):
    """A row beyond atol + rtol|r| passes when its max_abs is at most k x its noise floor."""
    c = case()
    ref, out, floor = outputs(c), outputs(c), outputs(c)
    out.c_n[3, 0, 1] += off
    floor.c_n[3, 0, 1] += 2.0**-17  # the floor of that row
    d = divergence(c, "a", out, ref, Tolerance(2.0**-18, 0, factor), floor)
    row = d.rows[(d.rows.output == "c_n") & (d.rows.layer == 1) & (d.rows.direction == 1)]
    assert row["tol_ratio"].iloc[0] > 1
    assert d.verdict == want and d.passed == (want == PASS)
    assert row["verdict"].iloc[0] == want
    assert d.rows["verdict"].tolist() == np.where(
        within(d.rows["tol_ratio"], d.rows["floor_ratio"], factor), PASS, DIVERGED).tolist()


def test_first_divergence_is_the_earliest_step_of_the_right_direction():
    c = case()
    ref, out = outputs(c), outputs(c)
    out.y[0, 1, 3] += 1e-3  # reverse direction (features 2..3), t=1
    out.y[0, 2, 0] += 1.0  # forward, t=2: larger, but later
    out.c_n[0, 0, 0] += 1.0  # a state row: y rows come first
    df = divergence(c, "a", out, ref, Tolerance(1e-5, 0)).rows
    f = first_divergence(df)
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 1, 1, 1)
    assert f["verdict"] == DIVERGED and np.isclose(f["max_abs"], 1e-3)
    assert compare.where(f) == "y L1 d1 t=1"
    assert compare.where(compare.worst(df)) == "y L1 d0 t=2"  # the first of two equal ratios
    out = outputs(c)
    out.c_n[1, 0, 0] += 1.0  # a state row only
    f = first_divergence(divergence(c, "a", out, ref, Tolerance(1e-5, 0)).rows)
    assert compare.where(f) == "c_n L0 d1"
    assert first_divergence(divergence(c, "a", ref, ref, Tolerance(1e-5, 0)).rows) is None


def test_tolerance_override_order():
    c = case(tolerance={"atol": 1e-4, "float32": {"rtol": 0.0}, "adapters": {"x": {"atol": 1e-3}}})
    assert tolerance_for(c, "y") == Tolerance(1e-4, 0.0)
    assert tolerance_for(c, "x") == Tolerance(1e-3, 0.0)
    assert tolerance_for(case(), "y").atol == 1e-5


def test_summary_and_the_run_show_the_verdict_compare_gave():
    """A pair's status, its summary row and the run's rows carry compare's verdict."""
    from harness.report.summary import pair_row
    from harness.results import PairResult, RunResult

    c = case()
    ref, good, bad = outputs(c), outputs(c), outputs(c)
    bad.h_n[3, 0, 1] += 1.0
    ds = [divergence(c, "a", good, ref, Tolerance(1e-5, 0)),
          divergence(c, "b", bad, ref, Tolerance(1e-6, 1e-6))]
    pairs = [PairResult("c", name, d.verdict, rows=d.rows)
             for name, d in zip("ab", ds, strict=True)]
    assert [p.status for p in pairs] == [PASS, DIVERGED]
    row = pair_row(pairs[1])
    assert row[1] == DIVERGED and row[4] == "h_n L1 d1"  # verdict, first diverging
    assert pair_row(pairs[0])[1] == PASS and pair_row(pairs[0])[4] == ""
    whole = RunResult([c], [], pairs).divergence
    pd.testing.assert_frame_equal(whole[compare.COLUMNS],
                                  pd.concat([d.rows for d in ds], ignore_index=True))
    assert list(whole["adapter"]) == ["a"] * 14 + ["b"] * 14
    assert whole.columns.tolist() == judges.columns()
    assert RunResult([c], [], []).divergence.columns.tolist() == judges.columns()
