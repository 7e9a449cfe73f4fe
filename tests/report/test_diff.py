"""``rnn-harness diff OLD NEW`` on real report folders.

Three small runs: ``old``; ``again`` (the same cases re-run: nothing changed); ``new``, where a
per-adapter tolerance override planted in one case makes torch-cpu DIVERGED. Growth, newly
diverging rows, status and environment changes are planted by editing copies of real folders.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import adapters as registry
from harness import compare, runner
from harness.cases import discover
from harness.cli import main
from harness.diff import diff_reports, load_report
from harness.report import write_report

pytestmark = pytest.mark.torch
pytest.importorskip("torch")

ADAPTERS = ["reference", "noise-floor", "torch-cpu"]
CASE = """
name: tiny
input_size: 3
hidden_size: 4
num_layers: 2
bidirectional: true
batch: 2
seq_len: 5
seq_lengths: [5, 3]
initial_state: random
seed: 4
matrix:
  cell: [lstm, gru]
"""
# float32 torch is ~1e-8 off the reference: beyond atol 1e-9, well within the default 1e-5.
TIGHT = "tolerance: {adapters: {torch-cpu: {atol: 1.0e-9, rtol: 0}}}\n"


def _run(folder: Path, out: Path) -> Path:
    result = runner.run(discover([folder]), registry.select(ADAPTERS))
    write_report(result, out)
    return out


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    (root / "cases").mkdir()
    case = root / "cases" / "tiny.yaml"
    case.write_text(CASE)
    out = {"old": _run(root / "cases", root / "old"), "again": _run(root / "cases", root / "again")}
    case.write_text(CASE.replace("seed: 4\n", "seed: 4\n" + TIGHT))
    out["new"] = _run(root / "cases", root / "new")
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_csv(folder: Path, change) -> None:
    rows = pd.read_csv(folder / "divergence.csv")
    change(rows)
    rows.to_csv(folder / "divergence.csv", index=False)


def edit_run(folder: Path, change) -> None:
    doc = json.loads((folder / "run.json").read_text())
    change(doc)
    (folder / "run.json").write_text(json.dumps(doc))


def diff(old: Path, new: Path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["diff", str(old), str(new), *extra])
    return code, capsys.readouterr().out


def test_the_planted_divergence_is_real(reports):
    status = {(p["case"], p["adapter"]): p["status"]
              for p in json.loads((reports["new"] / "run.json").read_text())["pairs"]}
    assert status[("tiny-lstm", "torch-cpu")] == status[("tiny-gru", "torch-cpu")] == "DIVERGED"
    old = json.loads((reports["old"] / "run.json").read_text())["pairs"]
    assert {p["status"] for p in old if p["adapter"] == "torch-cpu"} == {"pass"}


def test_the_rows_diff_reads_carry_compares_verdict(reports):
    """The verdicts a diff reads are the rule of :func:`harness.compare.within` over each row's
    ratio (none of these ratios is near enough to 1 for the csv's 6 digits to matter)."""
    rows = load_report(reports["new"]).rows
    assert ((rows["tol_ratio"] - 1).abs() > 1e-3).all()
    beyond = compare.diverged(rows["verdict"])
    assert beyond.any() and (~beyond).any()
    assert beyond.tolist() == (~compare.within(rows["tol_ratio"])).tolist()


def test_new_divergence_is_a_regression(reports, capsys, tmp_path):
    code, text = diff(reports["old"], reports["new"], capsys, "--out", str(tmp_path / "d.md"))
    assert code == 1
    assert "**Regression**: 2 pair(s) newly DIVERGED" in text
    section = text.split("## New divergences and errors")[1]
    for case in ("tiny-lstm", "tiny-gru"):
        line = next(x for x in section.splitlines() if x.startswith(f"| {case} "))
        assert "torch-cpu" in line and "pass" in line and "DIVERGED" in line
        assert " L1 d0 t=" in line and "x tol)" in line  # the first diverging row
    assert "## Fixed" not in text
    assert (tmp_path / "d.md").read_text() == text


def test_fixed_is_not_a_regression(reports, capsys):
    code, text = diff(reports["new"], reports["old"], capsys)
    assert code == 0
    assert "No regression." in text
    fixed = text.split("## Fixed")[1]
    assert "| tiny-gru " in fixed and "| tiny-lstm " in fixed and "DIVERGED" in fixed


def test_identical_runs(reports, capsys):
    code, text = diff(reports["old"], reports["again"], capsys)
    assert code == 0
    assert "No regression." in text
    assert "## " not in text.split("No regression.")[1]  # nothing to list


def test_growth_beyond_factor_on_a_diverged_row(reports, capsys, tmp_path):
    worse = copy(reports["new"], tmp_path / "worse")

    def grow(rows: pd.DataFrame) -> None:
        i = rows.index[(rows["adapter"] == "torch-cpu") & (rows["case"] == "tiny-gru")
                       & (rows["output"] == "h_n")][0]
        rows.loc[i, ["max_abs", "tol_ratio"]] *= 50

    edit_csv(worse, grow)
    code, text = diff(reports["new"], worse, capsys)
    assert code == 1
    section = text.split("## Errors grown more than 10x")[1]
    line = next(x for x in section.splitlines() if x.startswith("| tiny-gru"))
    assert "torch-cpu" in line and "h_n" in line and "50x" in line
    assert "New divergences" not in text  # the pair was DIVERGED before too
    code, _ = diff(reports["new"], worse, capsys, "--factor", "100")
    assert code == 0


def test_growth_within_tolerance_is_ignored_unless_asked(reports, capsys, tmp_path):
    worse = copy(reports["old"], tmp_path / "worse")

    def grow(rows: pd.DataFrame) -> None:  # 20x, still within tolerance (tol_ratio ~1e-2)
        sel = (rows["adapter"] == "torch-cpu") & (rows["output"] == "y")
        rows.loc[sel, ["max_abs", "tol_ratio"]] *= 20
        assert rows.loc[sel, "tol_ratio"].max() < 1

    edit_csv(worse, grow)
    code, text = diff(reports["old"], worse, capsys)
    assert code == 0 and "No regression." in text
    code, text = diff(reports["old"], worse, capsys, "--ignore-below", "0")
    assert code == 1 and "## Errors grown more than 10x" in text


def test_rows_newly_beyond_tolerance_in_a_diverged_pair(reports, capsys, tmp_path):
    # atol 1e-9 puts every torch-cpu row beyond tolerance; an earlier run where one row of the
    # DIVERGED pair was within it is planted by editing a copy.
    earlier = copy(reports["new"], tmp_path / "earlier")
    target = {}

    def within(rows: pd.DataFrame) -> None:
        i = rows.index[(rows["case"] == "tiny-lstm") & (rows["adapter"] == "torch-cpu")
                       & (rows["output"] == "c_n")][0]
        target["row"] = rows.loc[i].copy()
        rows.loc[i, ["verdict", "tol_ratio"]] = ["pass", 0.5]

    edit_csv(earlier, within)
    code, text = diff(earlier, reports["new"], capsys)
    assert code == 1
    assert "New divergences" not in text  # the pair was DIVERGED in both
    section = text.split("## Rows newly beyond tolerance in pairs already DIVERGED")[1]
    line = next(x for x in section.splitlines() if x.startswith("| tiny-lstm"))
    row = target["row"]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["tiny-lstm", "torch-cpu", "1", f"c_n L{row['layer']} d{row['direction']}"]


def test_status_and_environment_changes(reports, capsys, tmp_path):
    changed = copy(reports["old"], tmp_path / "changed")

    def change(doc: dict) -> None:
        doc["versions"]["torch"] = "9.9.9"
        doc["adapters"]["onnxruntime"] = {"available": False, "reason": "not installed",
                                          "device": "cpu"}
        for p in doc["pairs"]:
            if p["case"] == "tiny-gru" and p["adapter"] == "torch-cpu":
                p["status"], p["reason"] = "unavailable", "torch went away"

    edit_run(changed, change)
    code, text = diff(reports["old"], changed, capsys)
    assert code == 0  # informative, not a regression
    other = text.split("## Other status changes")[1]
    assert "| tiny-gru " in other and "unavailable" in other and "torch went away" in other
    env = text.split("## Environment changes")[1]
    assert "versions: torch" in env and "9.9.9" in env
    assert "adapters: onnxruntime.available" in env


def test_error_pair_is_a_regression(reports, capsys, tmp_path):
    broken = copy(reports["old"], tmp_path / "broken")

    def crash(doc: dict) -> None:
        for p in doc["pairs"]:
            if p["case"] == "tiny-lstm" and p["adapter"] == "noise-floor":
                p["status"], p["reason"] = "error", "RuntimeError: boom"

    edit_run(broken, crash)
    code, text = diff(reports["old"], broken, capsys)
    assert code == 1
    assert "RuntimeError: boom" in text.split("## New divergences and errors")[1]


def test_added_cases_listed(reports, tmp_path):
    fewer = copy(reports["old"], tmp_path / "fewer")
    edit_run(fewer, lambda doc: doc["cases"].pop("tiny-gru"))
    d = diff_reports(load_report(fewer), load_report(reports["old"]))
    assert d.cases_added == ["tiny-gru"] and not d.cases_removed


@pytest.mark.parametrize("what", ["missing folder", "missing csv", "bad factor"])
def test_bad_input_exit_2_one_line(reports, capsys, tmp_path, what):
    args = [str(reports["old"]), str(tmp_path / "nope")]
    if what == "missing csv":
        folder = copy(reports["old"], tmp_path / "partial")
        (folder / "divergence.csv").unlink()
        args = [str(reports["old"]), str(folder)]
    if what == "bad factor":
        args = [str(reports["old"]), str(reports["again"]), "--factor", "0.5"]
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rnn-harness: error: ") and err.count("\n") == 1


def test_a_changed_tolerance_is_reported_as_such(reports, capsys):
    """old -> new tightened torch-cpu's tolerance (issue 32): the diff says so, beside the pairs
    it made DIVERGED, in diff.md and on the terminal alike (the same text), and in the JSON."""
    code, text = diff(reports["old"], reports["new"], capsys)
    assert code == 1
    assert "**2 case(s) changed** between the runs (2 of them their tolerance)" in text
    section = text.split("## New divergences and errors")[1].split("##")[0]
    assert "| case changed" in section.splitlines()[2]  # the header
    for case in ("tiny-lstm", "tiny-gru"):
        line = next(x for x in section.splitlines() if x.startswith(f"| {case} "))
        assert line.rstrip(" |").endswith("tolerance")
    changes = text.split("## Case changes")[1]
    line = next(x for x in changes.splitlines() if x.startswith("| tiny-gru "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["tiny-gru", "tolerance.adapters.torch-cpu.atol", "(absent)", "1e-09"]
    code, out = diff(reports["old"], reports["new"], capsys, "--format", "json")
    doc = json.loads(out)
    assert {"case": "tiny-lstm", "what": "tolerance.adapters.torch-cpu.rtol", "old": "(absent)",
            "new": "0.0"} in doc["case_changes"]
    assert {e["case_changed"] for e in doc["new_bad"]} == {"tolerance"}
    # an unchanged case says nothing; another adapter's tolerance is not this pair's change
    code, text = diff(reports["old"], reports["again"], capsys)
    assert "case changed" not in text and "Case changes" not in text
    d = diff_reports(load_report(reports["old"]), load_report(reports["new"]))
    assert d.case_changed("tiny-lstm", "torch-cpu") == "tolerance"
    assert d.case_changed("tiny-lstm", "reference") == ""


def test_known_bug_states(reports, capsys, tmp_path):
    """A pair now ``looks fixed`` is to act on (exit 1, though no regression); DIVERGED -> known
    upstream bug is a status change, not a fix; known upstream bug -> pass is a fix."""
    def set_status(folder: Path, status: str, reason: str = "") -> Path:
        def change(doc: dict) -> None:
            for p in doc["pairs"]:
                if p["case"] == "tiny-lstm" and p["adapter"] == "torch-cpu":
                    p["status"], p["reason"] = status, reason
        edit_run(folder, change)
        return folder

    fixed_up = set_status(copy(reports["old"], tmp_path / "fixed"), compare.LOOKS_FIXED,
                          "bug looks fixed; remove expected.torch-cpu from the case")
    known = set_status(copy(reports["old"], tmp_path / "known"), compare.KNOWN_BUG)
    code, text = diff(known, fixed_up, capsys)
    assert code == 1
    assert "No regression." in text and "**To act on**: 1 pair(s)" in text
    line = next(x for x in text.split("## Looks fixed")[1].splitlines()
                if x.startswith("| tiny-lstm "))
    assert "known upstream bug" in line and "remove expected.torch-cpu" in line
    code, text = diff(known, reports["old"], capsys)
    assert code == 0 and "| tiny-lstm " in text.split("## Fixed")[1]
    now_known = set_status(copy(reports["new"], tmp_path / "now-known"), compare.KNOWN_BUG)
    code, text = diff(reports["new"], now_known, capsys)
    assert code == 0 and "## Fixed" not in text
    assert "known upstream bug" in text.split("## Other status changes")[1]
