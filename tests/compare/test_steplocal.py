"""Step-local divergence (harness/steplocal.py, ``run --step-mode``): each layer run one step at
a time from the reference's own states tells a mistake in the cell (a large one-step error) from
an error that builds along the sequence (small one-step errors, a growing free-running error).
The rows explain a verdict, the free-running rows alone decide it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.planted import planted_torch

from harness import compare, steplocal
from harness.adapters.reference import Reference
from harness.cli import main
from harness.diff import load_report
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

BIDI = dict(cell="lstm", input_size=3, hidden_size=5, proj_size=2, num_layers=2,
            direction="bidirectional", batch=3, seq_len=6, seq_lengths=[6, 3, 1],
            initial_state="random", seed=3)
# normal weights of std 1.5 in a 64-unit LSTM: a chaotic recurrence, where float32 rounding
# grows to O(1) differences over 60 steps although every single step is right
# A chaotic recurrence. Its tolerance is set in the case, which leaves out the noise-floor rule
# (the float32 floor is amplified alike, so under the default tolerances free-running passes).
CHAOTIC = Case(name="chaotic", cell="lstm", input_size=8, hidden_size=64, batch=2, seq_len=60,
               dtype="float32", weights={"init": "normal", "scale": 1.5},
               tolerance={"atol": 1e-5, "rtol": 1e-5})


def _valid(case: Case) -> set[tuple[int, int, int]]:
    lengths = case.seq_lengths or [case.seq_len] * case.batch
    return {(layer, d, t) for layer in range(case.num_layers) for d in case.directions
            for t in range(max(lengths))}


def _keys(rows: pd.DataFrame) -> set[tuple[int, int, int]]:
    return set(zip(rows["layer"].astype(int), rows["direction"].astype(int),
                   rows["t"].astype(int), strict=True))


# (a) the construction, independently of any framework --------------------------------------

@pytest.mark.parametrize("cell, extra", [("lstm", {}), ("gru", {"proj_size": 0}),
                                         ("lstm", {"direction": "reverse", "num_layers": 3})])
def test_reference_from_its_own_states_reproduces_itself(cell, extra):
    """The float64 reference run on the derived one-step cases gives back the reference's y of
    every layer exactly: the states, inputs and weights of the derived cases are the right ones
    (forward and reverse, within each sequence's length)."""
    case = Case(name="ref", **(BIDI | {"cell": cell, "dtype": "float64"} | extra))
    prep = prepare(case)
    tol = compare.tolerance_for(case, "reference")
    derived = steplocal.step_cases(prep)
    assert [sc.layer for sc in derived] == list(range(case.num_layers))
    for sc in derived:
        valid_steps = sum(BIDI["seq_lengths"])
        assert (sc.case.num_layers, sc.case.seq_len, sc.case.batch) == (1, 1, valid_steps)
        out, _ = Reference().run(sc.case, sc.canonical, sc.inputs)
        y = sc.scatter(out.y, case.batch, case.seq_len)
        rows = compare.step_divergence(case, "reference", sc.layer, y,
                                       prep.reference.y_layers[sc.layer], None, tol).rows
        assert (rows["mode"] == compare.STEP).all()
        assert rows["max_abs"].max() == 0.0


# (b) a framework that is right ------------------------------------------------------------

def test_torch_one_step_errors_pass_on_every_valid_step():
    pytest.importorskip("torch")
    from harness.adapters.torch_cpu import TorchCPU

    case = Case(name="bidi", **(BIDI | {"dtype": "float32"}))
    r = run_pair(prepare(case), TorchCPU(), step_mode="on")
    assert r.status == compare.PASS, r.reason
    steps = r.step_rows
    assert _valid(case) <= _keys(steps)
    assert compare.within(steps["tol_ratio"]).all()
    assert (steps["noise_floor"] > 0).any()  # the noise floor's own step predictions
    # auto: a passing pair costs nothing more
    assert run_pair(prepare(case), TorchCPU()).step_rows.empty


# (c) a mistake is a large one-step error ----------------------------------------------------

def _planted_recurrent_gate_order():
    return planted_torch("R")


def test_planted_recurrent_mistake_is_a_large_one_step_error_from_t1():
    pytest.importorskip("torch")
    case = Case(name="planted", cell="lstm", input_size=3, hidden_size=4, batch=2, seq_len=6,
                dtype="float32")
    r = run_pair(prepare(case), _planted_recurrent_gate_order())  # auto: float32, diverged
    assert r.status == compare.DIVERGED
    steps = r.step_rows
    assert set(steps["t"]) == set(range(case.seq_len))
    assert compare.within(steps[steps["t"] == 0]["tol_ratio"]).all()  # zero state: no R term
    assert (steps[steps["t"] >= 1]["tol_ratio"] > 100).all()
    assert "first at y L0 d0 t=1 (step)" in r.reason


# (d) a chaotic recurrence: every step right, the error builds along the sequence ------------

def test_chaotic_recurrence_diverges_and_says_every_one_step_error_is_within():
    """A tight tolerance on a chaotic case: DIVERGED by its free-running error (step rows never
    change a verdict: they cannot see a state-carrying bug), with step mode's finding in the
    reason."""
    pytest.importorskip("torch")
    from harness.adapters.torch_cpu import TorchCPU

    prep = prepare(CHAOTIC)
    free_only = run_pair(prep, TorchCPU(), step_mode="off")
    assert free_only.status == compare.DIVERGED  # free-running: far beyond tolerance
    assert free_only.worst["tol_ratio"] > 100
    r = run_pair(prep, TorchCPU())  # auto
    assert r.status == compare.DIVERGED
    assert r.reason.startswith("DIVERGED at y L0 d0 t=") and compare.STATE_NOT_CELL in r.reason
    assert not compare.within(compare.of_mode(r.rows, compare.FREE)["tol_ratio"]).all()
    assert compare.within(r.step_rows["tol_ratio"]).all()


def test_adapter_without_initial_states_says_step_mode_is_not_applicable():
    pytest.importorskip("torch")
    from harness.adapters.torch_cpu import TorchCPU

    class NoStates(TorchCPU):
        name = "torch-no-states"
        capabilities = dataclasses.replace(TorchCPU.capabilities, initial_state=False)

    r = run_pair(prepare(CHAOTIC), NoStates())
    assert r.status == compare.DIVERGED  # the free-running verdict stands
    assert "step mode not applicable: " in r.reason and "initial states" in r.reason
    assert r.step_rows.empty


def _rows(output: list[str], tol_ratio: list[float], mode: str) -> pd.DataFrame:
    n = len(output)
    return pd.DataFrame({"mode": [mode] * n, "output": output, "layer": [0] * n,
                         "direction": [0] * n, "t": list(range(n)), "max_abs": tol_ratio,
                         "tol_ratio": tol_ratio})


def test_pair_verdict_rules():
    free_bad = _rows(["y", "y", "h_n"], [0.5, 3.0, 2.0], compare.FREE)
    free_ok = _rows(["y", "y"], [0.5, 0.9], compare.FREE)
    steps_ok = _rows(["y", "y", "y"], [0.1, 0.2, 0.3], compare.STEP)
    steps_bad = _rows(["y", "y", "y"], [0.1, 7.0, 9.0], compare.STEP)
    assert compare.pair_verdict(free_ok) == (compare.PASS, "")
    assert compare.pair_verdict(free_bad) == (compare.DIVERGED, "")
    # step rows within: still DIVERGED, the reason says the cell is right
    assert compare.pair_verdict(free_bad, steps_ok) == (
        compare.DIVERGED, f"DIVERGED at y L0 d0 t=1; {compare.STATE_NOT_CELL}")
    status, reason = compare.pair_verdict(free_bad, steps_bad)
    assert status == compare.DIVERGED and "y L0 d0 t=1 (step)" in reason
    # step rows beyond tolerance under passing free rows: named, the verdict stays the free one
    status, reason = compare.pair_verdict(free_ok, steps_bad)
    assert status == compare.PASS and "the cell itself differs" in reason
    grads_bad = _rows(["y", "dx"], [0.5, 3.0], compare.FREE)  # step mode vouches for no gradient
    assert compare.pair_verdict(grads_bad, steps_ok) == (compare.DIVERGED, "")


# (e) reports: the mode column, and reports written before it ------------------------------

@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("steplocal")
    cases = root / "cases"
    cases.mkdir()
    (cases / "chaotic.yaml").write_text(
        "name: chaotic\ncell: lstm\ninput_size: 8\nhidden_size: 64\nbatch: 2\nseq_len: 60\n"
        "dtype: float32\nweights: {init: normal, scale: 1.5}\n"
        "tolerance: {atol: 1.0e-5, rtol: 1.0e-5}\n")
    out = {}
    for name, mode in (("new", "auto"), ("off", "off")):
        out[name] = root / name
        assert main(["run", str(cases), "--adapters", "reference,torch-cpu", "--out",
                     str(out[name]), "--quiet", "--step-mode", mode]) in (0, 1)
    # a report from before step mode: the free rows, no mode column
    out["old"] = root / "old"
    shutil.copytree(out["off"], out["old"])
    rows = pd.read_csv(out["old"] / "divergence.csv")
    rows.drop(columns="mode").to_csv(out["old"] / "divergence.csv", index=False)
    return out


def test_report_has_step_rows_summary_line_and_html_table(reports):
    rows = pd.read_csv(reports["new"] / "divergence.csv")
    assert set(rows["mode"]) == {compare.FREE, compare.STEP}
    steps = rows[rows["mode"] == compare.STEP]
    assert len(steps) == CHAOTIC.seq_len and (steps["verdict"] == compare.PASS).all()
    doc = json.loads((reports["new"] / "run.json").read_text())
    pairs = {p["adapter"]: p for p in doc["pairs"]}
    assert pairs["torch-cpu"]["status"] == compare.DIVERGED
    assert compare.STATE_NOT_CELL in pairs["torch-cpu"]["reason"]
    summary = (reports["new"] / "summary.md").read_text()
    assert "Step-local" in summary and "0 of 60 steps beyond tolerance" in summary
    assert "step-local rows" in (reports["new"] / "index.html").read_text()
    off = pd.read_csv(reports["off"] / "divergence.csv")
    assert set(off["mode"]) == {compare.FREE}


def test_diff_reads_reports_with_and_without_mode(reports, capsys):
    old = load_report(reports["old"]).rows
    assert set(old["mode"]) == {compare.FREE}
    # before (no mode) -> now (step rows): both DIVERGED alike, no regression
    assert main(["diff", str(reports["old"]), str(reports["new"])]) == 0
    assert main(["diff", str(reports["old"]), str(reports["off"])]) == 0


def test_merge_reads_reports_with_and_without_mode(reports, tmp_path):
    # two reports of different cases, one written before step mode
    renamed = tmp_path / "renamed"
    shutil.copytree(reports["new"], renamed)
    for f in ("divergence.csv", "run.json"):
        p = renamed / f
        p.write_text(p.read_text().replace("chaotic", "chaotic2"))
    merged = tmp_path / "merged"
    code = main(["merge", str(merged), str(reports["old"]), str(renamed), "--allow-partial"])
    assert code in (0, 1)
    rows = pd.read_csv(merged / "divergence.csv")
    by_case = rows.groupby("case")["mode"].agg(set).to_dict()
    assert by_case == {"chaotic": {compare.FREE}, "chaotic2": {compare.FREE, compare.STEP}}
    assert np.isfinite(rows["tol_ratio"]).all()
