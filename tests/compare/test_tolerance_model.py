"""The tolerance model on weights like a trained network's (cases/trained-like).

There correct float32 frameworks differ from float64 by about 2e-5, beyond atol = rtol = 1e-5,
because large weights and biases amplify float32 rounding. The noise floor computes the case
in float32 arithmetic (products accumulated in float32), so it is as far from float64 as they
are, and a row within k x that floor passes (:func:`harness.compare.within`). Layout mistakes
stay far beyond it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.planted import planted_torch

from harness import compare
from harness.cases import load_cases
from harness.cli import main
from harness.compare import NOISE_FLOOR_FACTOR, divergence, tolerance_for
from harness.data import Outputs
from harness.layouts import get_layout
from harness.mistakes import Scorer
from harness.npz import load_npz
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case, Tol

TRAINED_LIKE = Path(__file__).parents[2] / "cases" / "trained-like" / "trained-like.yaml"


@pytest.fixture(scope="module")
def trained_like():
    (case,) = load_cases(TRAINED_LIKE)
    return prepare(case)


def test_the_floor_is_as_far_from_float64_as_a_float32_framework(trained_like):
    """torch-cpu (its own float32 kernels) sits within a few times the floor on every row that
    matters, where a floor rounding each float64 product once sat 12-17x below it."""
    pytest.importorskip("torch")
    from harness.adapters.torch_cpu import TorchCPU

    r = run_pair(trained_like, TorchCPU())
    assert r.status == compare.PASS
    rows = r.rows[r.rows.tol_ratio > 0.1]  # the rows where the tolerance is tight
    assert len(rows) > 0
    assert (rows.floor_ratio <= NOISE_FLOOR_FACTOR / 2).all(), rows.floor_ratio.max()
    assert (rows.floor_ratio >= 1 / NOISE_FLOOR_FACTOR).all(), rows.floor_ratio.min()


def test_onnxruntime_beyond_atol_but_within_the_floor_passes(tmp_path, capsys):
    """onnxruntime is ~1.9x atol + rtol|r| at its worst row of trained-like: the floor passes
    it, through the CLI."""
    pytest.importorskip("onnxruntime")
    out = tmp_path / "report"
    assert main(["run", str(TRAINED_LIKE), "--adapters", "onnxruntime", "--out", str(out),
                 "--quiet"]) == 0
    import pandas as pd

    rows = pd.read_csv(out / "divergence.csv")
    rows = rows[rows.adapter == "onnxruntime"]
    assert (rows.verdict == compare.PASS).all()
    assert rows.tol_ratio.max() > 1  # the tolerance alone would not have passed it
    assert rows.floor_ratio.max() <= NOISE_FLOOR_FACTOR




@pytest.mark.parametrize("kind", ["W", "R"])
def test_a_planted_gate_swap_on_trained_like_diverges(trained_like, kind):
    """A wrong gate order is errors of order 1, 10⁴x and more beyond k x the floor; with random
    initial states it shows at t=0 in both kernels."""
    pytest.importorskip("torch")
    r = run_pair(trained_like, planted_torch(kind))
    assert r.status == compare.DIVERGED
    assert (r.first_diverging["output"], r.first_diverging["t"]) == ("y", 0)
    y = r.rows[r.rows.output == "y"]
    assert y.max_abs.max() > 0.1
    assert y.floor_ratio.max() > 1e3 * NOISE_FLOOR_FACTOR


def test_every_plausible_layout_mistake_on_trained_like_diverges(trained_like):
    """Every single mistake of the doctor's catalogue (gate orders, transposes, biases, forget
    offsets, swapped kernels or directions, variants, data order) applied to the weights file
    as torch reads it: each pair is DIVERGED under the floor rule."""
    prep = trained_like
    case = prep.case
    native = load_npz(case.resolve(case.weights.file), what="weights")
    scorer = Scorer(case, get_layout("torch"), native, prep.inputs, prep.reference.named(),
                    tolerance_for(case, "expected"))
    tol = tolerance_for(case, "planted")
    assert tol.floor_factor == NOISE_FLOOR_FACTOR
    mistakes = scorer.catalogue.mistakes
    assert len(mistakes) >= 20
    for m in mistakes:
        named = scorer.outputs(scorer.trial((m,)))
        out = Outputs(y=named["y"], h_n=named.get("h_n"), c_n=named.get("c_n"))
        d = divergence(case, m.id, out, prep.reference, tol, prep.noise_floor)
        assert not d.passed, m.id
        assert d.rows.max_abs.max() > 1e-2, m.id


def test_a_case_tolerance_is_the_whole_rule():
    """The floor rule belongs to the default tolerances: a case that sets its own tolerance for
    a pair is judged by that alone (so it may demand closer agreement than float32 noise), an
    adapter's own default keeps it, and a float64 case has none (its floor is the reference)."""
    sizes = dict(name="c", cell="lstm", input_size=2, hidden_size=2)
    assert tolerance_for(Case(**sizes), "x").floor_factor == NOISE_FLOOR_FACTOR
    tight = Case(**sizes, tolerance={"adapters": {"x": {"atol": 1e-9, "rtol": 0.0}}})
    assert tolerance_for(tight, "x") == compare.Tolerance(1e-9, 0.0, None)
    assert tolerance_for(tight, "y").floor_factor == NOISE_FLOOR_FACTOR
    for override in ({"atol": 1e-4}, {"float32": {"rtol": 1e-4}}):
        assert tolerance_for(Case(**sizes, tolerance=override), "x").floor_factor is None
    loose = tolerance_for(Case(**sizes), "x", {"float32": Tol(atol=1e-3)})
    assert loose == compare.Tolerance(1e-3, 1e-5, NOISE_FLOOR_FACTOR)
    assert tolerance_for(Case(**sizes, dtype="float64"), "x").floor_factor is None


def test_within_the_floor_or_the_tolerance():
    k = NOISE_FLOOR_FACTOR
    tol_ratio = np.array([0.5, 2.0, 2.0, 2.0, np.nan, 2.0])
    floor_ratio = np.array([100.0, k, np.nextafter(k, np.inf), np.nan, np.nan, np.inf])
    assert compare.within(tol_ratio, floor_ratio, k).tolist() == [True, True, False, False,
                                                                   False, False]
    assert compare.within(tol_ratio, floor_ratio).tolist() == [True] + [False] * 5
