"""Divergence metrics on hand-made outputs: rows, ULPs, relative error at zero, verdicts."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.compare import DIVERGED, PASS, Tolerance, divergence, first_divergence, tolerance_for
from harness.data import Outputs
from harness.spec import Case


def case(**kw):
    base = dict(name="c", cell="lstm", input_size=2, hidden_size=2, batch=1, seq_len=3,
                num_layers=2, bidirectional=True, dtype="float32")
    return Case(**{**base, **kw})


def outputs(c, fill=0.5):
    return Outputs(y=np.full((1, 3, 4), fill), h_n=np.full((4, 1, 2), fill),
                   c_n=np.full((4, 1, 2), fill))


def test_rows_per_output_layer_direction_t():
    c = case()
    ref = outputs(c)
    df = divergence(c, "a", outputs(c), ref, Tolerance(1e-5, 0))
    # y: last layer only (no y_layers), 2 directions x 3 steps; h_n, c_n: 2 layers x 2 directions
    assert len(df) == 6 + 4 + 4
    assert (df["verdict"] == PASS).all() and (df["max_abs"] == 0).all()


def test_first_divergence_is_the_earliest_step_of_the_right_direction():
    c = case()
    ref, out = outputs(c), outputs(c)
    out.y[0, 1, 3] += 1e-3  # reverse direction (features 2..3), t=1
    out.y[0, 2, 0] += 1e-3  # forward, t=2
    df = divergence(c, "a", out, ref, Tolerance(1e-5, 0))
    f = first_divergence(df)
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 1, 1, 1)
    assert f["verdict"] == DIVERGED and np.isclose(f["max_abs"], 1e-3)


def test_ulp_and_relative_error_at_zero_are_finite():
    c = case(num_layers=1, bidirectional=False)
    ref = Outputs(y=np.zeros((1, 3, 2)), h_n=np.ones((1, 1, 2)), c_n=np.ones((1, 1, 2)))
    out = Outputs(y=np.zeros((1, 3, 2)), h_n=np.ones((1, 1, 2)) + 2.0**-23, c_n=np.ones((1, 1, 2)))
    out.y[0, 0, 0] = 1e-9
    df = divergence(c, "a", out, ref, Tolerance(1e-5, 0))
    h = df[df.output == "h_n"].iloc[0]
    assert h["max_ulp"] == 1.0  # one float32 ulp at 1.0
    y0 = df[(df.output == "y") & (df.t == 0)].iloc[0]
    assert np.isfinite(y0["max_rel"]) and np.isclose(y0["max_rel"], 1e-9 / 2.0**-23)


def test_tolerance_override_order():
    c = case(tolerance={"atol": 1e-4, "float32": {"rtol": 0.0}, "adapters": {"x": {"atol": 1e-3}}})
    assert tolerance_for(c, "y") == Tolerance(1e-4, 0.0)
    assert tolerance_for(c, "x") == Tolerance(1e-3, 0.0)
    assert tolerance_for(case(), "y").atol == 1e-5


def test_a_runs_rows_make_one_frame_equal_to_the_pairs_frames():
    """Rows kept as columns while a run goes: one frame of many pairs is the concatenation
    of each pair's frame (same values, dtypes and order), and the verdict needs no frame."""

    from harness.compare import frame_of, rows_of
    from harness.runner import PairResult, RunResult

    c = case()
    ref, good, bad = outputs(c), outputs(c), outputs(c)
    bad.h_n[3, 0, 1] += 1.0
    blocks = [rows_of(c, "a", good, ref, Tolerance(1e-5, 0)),
              rows_of(c, "b", bad, ref, Tolerance(1e-6, 1e-6))]
    assert [b.verdict for b in blocks] == [PASS, DIVERGED]
    whole = frame_of(blocks)
    parts = pd.concat([b.frame() for b in blocks], ignore_index=True)
    pd.testing.assert_frame_equal(whole, parts)
    assert list(whole["adapter"]) == ["a"] * 14 + ["b"] * 14
    assert list(whole["rtol"].unique()) == [0.0, 1e-6]

    pairs = [PairResult("c", "a", PASS, block=blocks[0]), PairResult("c", "b", DIVERGED,
                                                                     block=blocks[1])]
    assert pairs[1].rows["verdict"].eq(DIVERGED).any()  # a pair's frame, made when asked
    result = RunResult([c], [], pairs)
    pd.testing.assert_frame_equal(result.divergence, whole)
    pairs[0].rows = parts.iloc[:14]  # a frame read back from a report (merge) is kept as is
    assert pairs[0].block is None
    pd.testing.assert_frame_equal(result.divergence, whole)


def test_worst_and_first_diverging_rows_without_a_frame():
    """A pair's worst and first diverging rows from its block are the rows the frame gives."""
    from harness.compare import rows_of
    from harness.runner import PairResult

    c = case()
    ref = outputs(c)
    cases = [outputs(c) for _ in range(4)]
    cases[1].y[0, 2, 0] += 1e-3  # one diverging y row
    cases[2].y[0, 1, 3] += 1e-3  # two: the earlier step wins, whatever the size
    cases[2].y[0, 2, 0] += 1.0
    cases[3].c_n[1, 0, 0] += 1.0  # a state row only
    for out in cases:
        block = rows_of(c, "a", out, ref, Tolerance(1e-5, 0))
        frame = block.frame()
        with_block = PairResult("c", "a", block.verdict, block=block)
        with_frame = PairResult("c", "a", block.verdict)
        with_frame.rows = frame
        for get in ("worst", "first_diverging"):
            got, want = getattr(with_block, get), getattr(with_frame, get)
            if want is None:
                assert got is None
                continue
            assert list(got) == list(frame.columns)
            for k in frame.columns:
                assert (pd.isna(got[k]) and pd.isna(want[k])) or got[k] == want[k], (get, k)


def test_rows_say_what_they_read_and_whether_it_was_finite():
    """The runner leaves NaN/Inf in what the divergence read to its sums: ``reads`` names
    those outputs, ``finite`` is False when one held a NaN or Inf."""
    from harness.compare import rows_of

    c = case()
    ref, out = outputs(c), outputs(c)
    block = rows_of(c, "a", out, ref, Tolerance(1e-5, 0))
    assert block.reads == {"y", "h_n", "c_n"} and block.finite
    out.c_n[2, 0, 1] = np.nan
    assert not rows_of(c, "a", out, ref, Tolerance(1e-5, 0)).finite
    layered = Outputs(y=np.full((1, 3, 4), 0.5), h_n=out.h_n, c_n=ref.c_n,
                      y_layers=[np.full((1, 3, 4), 0.5)] * 2)  # y is not the last layer's array
    ref.y_layers = [ref.y, ref.y]
    assert rows_of(c, "a", layered, ref, Tolerance(1e-5, 0)).reads == {"h_n", "c_n"}
