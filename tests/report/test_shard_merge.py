"""``run --shard K/N`` and ``rnn-harness merge``.

A small run (reference, noise-floor, torch-cpu on cases that pass, diverge and are not
applicable) is run whole and as 3 shards, and the merge of the shards must be the whole run's
report except for timings and the merge's own notes; a bad shard and crafted or mismatched shard
reports are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from support.fault_adapters import Correct, Raises

from harness import runner
from harness.adapters.reference import Reference
from harness.cli import main
from harness.merge import merge_reports
from harness.report import write_report
from harness.run_options import RunOptions
from harness.shard import Shard, pair_id
from harness.spec import Case

ADAPTERS = "reference,noise-floor,torch-cpu"
CASES = """
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
DIVERGES = """
name: strict
cell: lstm
input_size: 2
hidden_size: 3
batch: 2
seq_len: 4
seed: 5
tolerance: {adapters: {torch-cpu: {atol: 1.0e-14, rtol: 0.0}}}
"""
PEEPHOLES = """
name: peep
cell: lstm
input_size: 2
hidden_size: 3
peepholes: true
batch: 1
seq_len: 3
seed: 6
"""


# run --shard ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["0/3", "4/3", "a/b", "1/3", "1/99999999999999999999",
                                  "1/20000"])  # N above run.json's bound, refused at the start
def test_run_refuses_a_bad_shard_with_exit_2(text, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(PEEPHOLES)
    code = main(["run", str(case), "--adapters", "reference", "--out", str(tmp_path / "r"),
                 "--shard", text])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "--shard" in err and text in err
    assert not (tmp_path / "r").exists()


# A whole run, its shards, and their merge ------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("shards")
    cases = root / "cases"
    cases.mkdir()
    for name, text in (("tiny", CASES), ("strict", DIVERGES), ("peep", PEEPHOLES)):
        (cases / f"{name}.yaml").write_text(text)
    folders = {}
    for name, extra in (("whole", []), *((f"s{k}", ["--shard", f"{k}/3"]) for k in (1, 2, 3))):
        folders[name] = root / name
        code = main(["run", str(cases), "--adapters", ADAPTERS, "--out", str(folders[name]),
                     "--quiet", "--save-outputs", *extra])
        diverged = any(p["status"] == "DIVERGED" for p in _run(folders[name])["pairs"])
        assert code == (1 if diverged else 0)
        assert diverged or name != "whole"  # strict::torch-cpu diverges on purpose
    folders["merged"] = root / "merged"
    assert main(["merge", str(folders["merged"]), *(str(folders[f"s{k}"]) for k in (3, 1, 2))]) == 1
    return folders


def _run(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def _pairs(folder: Path) -> list[tuple[str, str, str, str]]:
    return [(p["case"], p["adapter"], p["status"], p["reason"]) for p in _run(folder)["pairs"]]


def _untimed_summary(text: str) -> list[list[str]]:
    """summary.md without timings (the seconds column, the headline's total) and the merge's
    own note: a list of lines, table lines as lists of stripped cells."""
    out, seconds = [], None
    for line in text.splitlines():
        if line.startswith(("Merged from ", "**Warning**")):
            continue
        if not line.startswith("|"):
            seconds = None
            out.append([line.split(" — ")[0]])
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if seconds is None and "seconds" in cells:
            seconds = cells.index("seconds")
        if seconds is not None:
            cells[seconds] = ""
        out.append(cells)
    return [line for line in out if line != [""]]


def test_each_shard_holds_only_its_pairs_and_says_which(runs):
    whole = _pairs(runs["whole"])
    ids = [pair_id(c, a) for c, a, *_ in whole]
    seen: list[str] = []
    for k in (1, 2, 3):
        doc = _run(runs[f"s{k}"])
        assert doc["shard"] == f"{k}/3"
        mine = [pair_id(p["case"], p["adapter"]) for p in doc["pairs"]]
        assert doc["shard_pairs"] == mine
        assert set(mine) == set(Shard(k, 3).pick(ids))
        csv = pd.read_csv(runs[f"s{k}"] / "divergence.csv")
        rows = {pair_id(c, a) for c, a in zip(csv["case"], csv["adapter"], strict=True)}
        assert rows <= set(mine)
        assert doc["shard_of"]["adapters"] == ADAPTERS.split(",")
        assert doc["shard_of"]["cases"] == list(_run(runs["whole"])["cases"])
        seen += mine
    assert sorted(seen) == sorted(ids)  # every pair exactly once
    assert "shard" not in _run(runs["whole"])


def test_merged_report_equals_the_whole_run(runs):
    whole, merged = runs["whole"], runs["merged"]
    assert (merged / "divergence.csv").read_text() == (whole / "divergence.csv").read_text()
    assert _pairs(merged) == _pairs(whole)  # same pairs, statuses, reasons, same order
    assert {"pass", "DIVERGED", "not applicable", "baseline"} <= {p[2] for p in _pairs(whole)}
    assert _untimed_summary((merged / "summary.md").read_text()) == \
        _untimed_summary((whole / "summary.md").read_text())
    assert (merged / "layouts.md").read_text() == (whole / "layouts.md").read_text()
    w, m = _run(whole), _run(merged)
    assert m["versions"] == w["versions"] and m["precision_flags"] == w["precision_flags"]
    assert list(m["cases"]) == list(w["cases"])
    assert m["shards"] == ["1/3", "2/3", "3/3"] and "shard" not in m
    shard_seconds = [_run(runs[f"s{k}"])["seconds"] for k in (1, 2, 3)]
    assert m["seconds"] == pytest.approx(sum(shard_seconds), abs=0.01)
    assert set(m["shard_runs"]) == {"1/3", "2/3", "3/3"}
    html = (merged / "index.html").read_text()
    assert html.count("<section") == (whole / "index.html").read_text().count("<section")
    assert sorted(p.name for p in (merged / "plots").glob("*.png")) == \
        sorted(p.name for p in (whole / "plots").glob("*.png"))
    saved = sorted(str(p.relative_to(whole)) for p in (whole / "outputs").rglob("*.npz"))
    assert saved and saved == sorted(str(p.relative_to(merged))
                                     for p in (merged / "outputs").rglob("*.npz"))
    assert "Merged from 3 report folder(s): 1/3, 2/3, 3/3" in (merged / "summary.md").read_text()


def test_merged_report_diffs_clean_against_the_whole_run(runs, capsys):
    assert main(["diff", str(runs["whole"]), str(runs["merged"])]) == 0
    assert "No regression." in capsys.readouterr().out


def test_merge_takes_out_as_run_and_diff_do(runs, tmp_path, capsys):
    """``merge A B C --out M`` is ``merge M A B C``; errors about M name the option used."""
    shards = [str(runs[f"s{k}"]) for k in (1, 2, 3)]
    assert main(["merge", *shards, "--out", str(tmp_path / "m")]) == 1  # a case diverges
    assert (tmp_path / "m" / "divergence.csv").read_text() == \
        (runs["merged"] / "divergence.csv").read_text()
    assert "merged 3 report(s) (1/3, 2/3, 3/3)" in capsys.readouterr().out
    assert main(["merge", *shards, "--out", shards[0]]) == 2
    assert "another --out" in capsys.readouterr().err
    assert main(["merge", shards[0]]) == 2  # no --out: the first folder is OUT_DIR
    assert "OUT_DIR: expected the merged report folder and at least one shard folder" in \
        capsys.readouterr().err


def test_merge_refuses_a_missing_shard_unless_partial(runs, tmp_path, capsys):
    code = main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(runs["s3"])])
    err = capsys.readouterr().err
    assert code == 2 and "missing shard(s) 2/3" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m").exists()
    code = main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(runs["s3"]),
                 "--allow-partial"])
    assert code in (0, 1)
    doc = _run(tmp_path / "m")
    assert doc["missing_shards"] == ["2/3"] and doc["shards"] == ["1/3", "3/3"]
    assert len(doc["pairs"]) == len(_run(runs["s1"])["pairs"]) + len(_run(runs["s3"])["pairs"])
    assert "partial merge: shard(s) 2/3 missing" in (tmp_path / "m" / "summary.md").read_text()


def _relabel(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    doc = _run(dst)
    doc.update(changes)
    (dst / "run.json").write_text(json.dumps(doc))
    return dst


def test_merge_refuses_overlapping_pairs(runs, tmp_path, capsys):
    twin = _relabel(runs["s1"], tmp_path / "twin", shard="2/3")
    code = main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(twin), str(runs["s3"]),
                 "--allow-partial"])
    err = capsys.readouterr().err
    assert code == 2 and "in two report folders" in err and "overlap" in err
    code = main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(runs["s1"])])
    assert code == 2 and "in two report folders" in capsys.readouterr().err


def test_merge_refuses_a_shard_given_twice_and_shards_of_other_runs(runs, tmp_path, capsys):
    empty = _relabel(runs["s2"], tmp_path / "empty", pairs=[], shard_pairs=[])
    assert main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(runs["s2"]), str(empty),
                 str(runs["s3"])]) == 2
    assert "shard 2/3 is given twice" in capsys.readouterr().err
    other = _relabel(runs["s2"], tmp_path / "other",
                     shard_of={"cases": ["x", "y", "z"], "adapters": ["reference"]})
    assert main(["merge", str(tmp_path / "m"), str(runs["s1"]), str(other), str(runs["s3"])]) == 2
    assert "different runs" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m"), str(runs["whole"])]) == 2
    assert "not a shard" in capsys.readouterr().err
    assert main(["merge", str(runs["s1"]), str(runs["s1"]), str(runs["s2"]), str(runs["s3"])]) == 2
    assert "overwrite" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "m"), str(tmp_path / "nowhere")]) == 2
    assert "report folder not found" in capsys.readouterr().err


def test_merge_warns_about_different_versions(runs, tmp_path):
    doc = _run(runs["s2"])
    versions = dict(doc["versions"], numpy="0.0-planted")
    older = _relabel(runs["s2"], tmp_path / "older", versions=versions)
    merged = merge_reports(tmp_path / "m", [runs["s1"], older, runs["s3"]])
    assert any("numpy" in w and "0.0-planted (2/3)" in w for w in merged.warnings)
    summary = (tmp_path / "m" / "summary.md").read_text()
    assert "**Warning**: the shards ran with different versions: numpy" in summary
    m = _run(tmp_path / "m")
    assert m["shard_runs"]["2/3"]["versions"]["numpy"] == "0.0-planted"
    assert "0.0-planted (2/3)" in m["versions"]["numpy"]


def test_merge_keeps_errors_log_and_unknown_adapters(tmp_path):
    """Error pairs' tracebacks come back in pair order; adapters this installation does not
    know (here: test-only ones) are merged without layout tables."""
    cases = [Case(name=n, cell="lstm", input_size=2, hidden_size=3, batch=1, seq_len=2)
             for n in ("a", "b", "c")]
    adapters = [Reference(), Raises(), Correct()]
    write_report(runner.run(cases, adapters), tmp_path / "whole")
    for k in (1, 2):
        result = runner.run(cases, adapters, RunOptions(shard=Shard(k, 2)))
        write_report(result, tmp_path / f"s{k}")
    merged = merge_reports(tmp_path / "m", [tmp_path / "s2", tmp_path / "s1"])
    assert merged.result.failed
    assert (tmp_path / "m" / "errors.log").read_text() == \
        (tmp_path / "whole" / "errors.log").read_text()
    assert _pairs(tmp_path / "m") == _pairs(tmp_path / "whole")


def test_merge_keeps_each_adapters_environment_from_the_shard_that_ran_it(tmp_path, capsys):
    """One case, two adapters, two shards: each adapter runs in one shard only, and the other
    shard records it without an environment. The merged run.json carries the environment of
    the shard that ran it, as the whole run does, and diff sees no environment change."""
    pytest.importorskip("torch")
    (tmp_path / "tiny.yaml").write_text(CASES.split("matrix:")[0] + "cell: lstm\n")
    folders = {}
    for name, extra in (("whole", []), ("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"])):
        folders[name] = tmp_path / name
        main(["run", str(tmp_path / "tiny.yaml"), "--adapters", "reference,torch-cpu", "--out",
              str(folders[name]), "--quiet", *extra])
    ran = {k: {p["adapter"] for p in _run(folders[k])["pairs"]} for k in ("s1", "s2")}
    assert ran["s1"] and ran["s2"] and not ran["s1"] & ran["s2"]
    main(["merge", str(tmp_path / "merged"), str(folders["s1"]), str(folders["s2"])])
    whole, merged = _run(folders["whole"]), _run(tmp_path / "merged")
    for name in ("reference", "torch-cpu"):
        assert whole["adapters"][name].get("environment")
        assert merged["adapters"][name].get("environment") == \
            whole["adapters"][name]["environment"], name
    capsys.readouterr()
    main(["diff", str(folders["whole"]), str(tmp_path / "merged")])
    assert "environment" not in capsys.readouterr().out.lower()


def _no_blind_check(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a report must render the recorded blind-spot check, not make one")

    from harness import blind

    monkeypatch.setattr(blind, "check", refuse)


def test_a_merged_report_renders_the_shards_recorded_blind_checks(runs, tmp_path, monkeypatch):
    """Each shard records its cases' blind-spot checks in run.json; the merge combines them and
    renders them as the whole run does, without checking anything again."""
    _no_blind_check(monkeypatch)
    out = tmp_path / "merged"
    assert main(["merge", str(out), *(str(runs[f"s{k}"]) for k in (2, 3, 1))]) == 1
    merged = (out / "summary.md").read_text()
    assert _untimed_summary(merged) == _untimed_summary(
        (runs["whole"] / "summary.md").read_text())
    assert merged.count("Blind to") == len(_run(runs["whole"])["blind_checks"]) > 0
    assert _run(out)["blind_checks"] == _run(runs["whole"])["blind_checks"]


def test_a_merge_of_reports_from_before_the_recorded_checks_carries_their_warnings(
        runs, tmp_path, monkeypatch):
    """A shard of run.json schema 1 recorded only each case's warning text: the merge carries
    that text over as it is, and still checks nothing again."""
    shards = []
    for k in (1, 2, 3):
        folder = Path(shutil.copytree(runs[f"s{k}"], tmp_path / f"s{k}"))
        doc = _run(folder)
        doc.pop("blind_checks")
        doc["schema_version"] = 1
        doc["blind_spots"] = {"peep": "Blind to (recorded by an older rnn-harness): something."}
        (folder / "run.json").write_text(json.dumps(doc))
        shards.append(str(folder))
    _no_blind_check(monkeypatch)
    out = tmp_path / "merged"
    assert main(["merge", str(out), *shards]) == 1
    summary = (out / "summary.md").read_text()
    assert "Blind to (recorded by an older rnn-harness): something." in summary
    assert "Blind to (recorded by an older rnn-harness): something." in \
        (out / "index.html").read_text()


# Shards edited after they ran (issue 46) -------------------------------------------------------

def _copies(runs: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    return {f"s{k}": Path(shutil.copytree(runs[f"s{k}"], tmp_path / f"s{k}")) for k in (1, 2, 3)}


def _edit_pair(shards: dict[str, Path], case: str, adapter: str, **changes) -> Path:
    """Change a pair's entry in the run.json of the shard that holds it; that shard's folder."""
    for folder in shards.values():
        doc = _run(folder)
        for p in doc["pairs"]:
            if (p["case"], p["adapter"]) == (case, adapter):
                p.update(changes)
                (folder / "run.json").write_text(json.dumps(doc))
                return folder
    raise AssertionError(f"no shard holds {case}::{adapter}")


def _merge_error(shards: dict[str, Path], tmp_path: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "merged"), *map(str, shards.values())]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert not (tmp_path / "merged").exists()
    return err[0]


@pytest.mark.parametrize("case, adapter, status, derived", [
    ("strict", "torch-cpu", "pass", "DIVERGED"),  # its rows are still beyond tolerance
    # the case's recorded spec declares no expected divergence
    ("strict", "torch-cpu", "known upstream bug", "DIVERGED"),
    ("tiny-lstm", "torch-cpu", "known upstream bug", "pass"),
])
def test_merge_derives_each_pairs_status_from_its_rows_and_spec(runs, tmp_path, capsys, case,
                                                                 adapter, status, derived):
    shards = _copies(runs, tmp_path)
    edited = _edit_pair(shards, case, adapter, status=status)
    err = _merge_error(shards, tmp_path, capsys)
    assert err.startswith(f"rnn-harness: error: {edited / 'run.json'}: pairs: pair "
                          f"{case}::{adapter} is {status!r} in run.json, but its divergence.csv "
                          f"rows and the case's recorded spec give {derived!r}"), err


def test_merge_refuses_rows_of_a_pair_that_compared_nothing(runs, tmp_path, capsys):
    shards = _copies(runs, tmp_path)
    edited = _edit_pair(shards, "strict", "torch-cpu", status="not applicable")
    err = _merge_error(shards, tmp_path, capsys)
    assert f"{edited / 'run.json'}: pairs: pair strict::torch-cpu is 'not applicable'" in err


def test_merge_refuses_a_recorded_spec_of_another_case(runs, tmp_path, capsys):
    shards = _copies(runs, tmp_path)
    for folder in shards.values():  # every shard records the spec of each case it ran
        doc = _run(folder)
        if "peep" in doc["cases"]:
            doc["cases"]["peep"]["spec"]["name"] = "ghost"
            (folder / "run.json").write_text(json.dumps(doc))
    err = _merge_error(shards, tmp_path, capsys)
    assert "run.json: cases.peep.spec.name: case 'peep': its recorded spec is of another case, " \
           "'ghost'" in err


ESCAPES = "\x1b]0;pwned\x07\x1b[2J"  # sets the window title, clears the screen


def test_escape_sequences_from_a_shard_reach_no_terminal_and_no_markdown(runs, tmp_path, capsys):
    shards = _copies(runs, tmp_path)
    doc = _run(shards["s2"])
    doc["versions"] = {k: f"{v}{ESCAPES}" for k, v in doc["versions"].items()}
    doc["platform"] = f"Linux{ESCAPES}"
    (shards["s2"] / "run.json").write_text(json.dumps(doc))
    _edit_pair(shards, "strict", "torch-cpu", reason=f"odd{ESCAPES}")
    capsys.readouterr()
    out = tmp_path / "merged"
    assert main(["merge", str(out), *map(str, shards.values())]) == 1
    captured = capsys.readouterr()
    assert "the shards ran with different versions" in captured.err
    assert "\\x1b]0;pwned\\x07" in captured.err  # shown, escaped
    for text in (captured.out, captured.err, (out / "summary.md").read_text()):
        assert "\x1b" not in text and "\x07" not in text
    assert main(["diff", str(runs["whole"]), str(out), "--out", str(tmp_path / "d.md")]) == 0
    captured = capsys.readouterr()
    assert "\\x1b[2J" in captured.out  # the platform and versions changed: shown, escaped
    for text in (captured.out, captured.err, (tmp_path / "d.md").read_text()):
        assert "\x1b" not in text and "\x07" not in text


@pytest.mark.parametrize("name, cap", [("divergence.csv", "MAX_DIVERGENCE_CSV"),
                                       ("errors.log", "MAX_ERRORS_LOG")])
def test_files_of_other_jobs_reports_are_read_with_a_size_cap(runs, tmp_path, capsys,
                                                              monkeypatch, name, cap):
    from harness.report import read_back

    shards = _copies(runs, tmp_path)
    path = shards["s1"] / name
    path.write_text(path.read_text() if path.exists() else "== tiny-lstm::torch-cpu\nx\n")
    monkeypatch.setattr(read_back, cap, path.stat().st_size - 1)  # a byte too many
    err = _merge_error(shards, tmp_path, capsys)
    assert err.startswith(f"rnn-harness: error: {path}: larger than "), err
    assert main(["diff", str(shards["s1"]), str(shards["s2"])]) == 2
    assert capsys.readouterr().err.startswith(f"rnn-harness: error: {path}: larger than ")


# the strict case's model, quantized
QUANTIZED = (DIVERGES.split("tolerance:")[0].replace("name: strict", "name: q")
             + "quantization: {calibration_batches: 2}\n"
             + "adapters: [reference, torch-dynamic-int8]\n")


def test_merge_derives_a_quantized_pairs_status_from_its_rows_and_sqnr_record(tmp_path,
                                                                              capsys):
    """A quantized pair (judged in output steps and by its cost, harness/quantization.py) is
    derived again like every pair: its rows and run.json's SQNR record, by the run's rule. An
    ideal SQNR raised past the margin, or the record removed, is a shard changed after it
    ran."""
    pytest.importorskip("torch")
    (tmp_path / "q.yaml").write_text(QUANTIZED)
    shards = {"s1": tmp_path / "s1"}  # one shard of one: the merge's checks, at least cost
    assert main(["run", str(tmp_path / "q.yaml"), "--out", str(shards["s1"]), "--quiet",
                 "--plots", "none", "--shard", "1/1", "--adapters",
                 "reference,torch-dynamic-int8"]) == 0
    pair = next(p for p in _run(shards["s1"])["pairs"] if p["adapter"] == "torch-dynamic-int8")
    assert pair["status"] == "pass" and pair["quantization"]["ideal_sqnr_db"] > 20
    assert main(["merge", str(tmp_path / "whole"), *map(str, shards.values())]) == 0
    merged = _run(tmp_path / "whole")["pairs"]
    assert [p["quantization"] for p in merged if p["adapter"] == "torch-dynamic-int8"] == [
        pair["quantization"]]

    # the SQNR over y is the rows' (tests/report/test_merge_forged_quantized.py); an ideal
    # raised past the margin gives another status
    sqnr = pair["quantization"]["sqnr_db"]
    _edit_pair(shards, "q", "torch-dynamic-int8", quantization={"sqnr_db": sqnr,
                                                                "ideal_sqnr_db": sqnr + 10})
    err = _merge_error(shards, tmp_path, capsys)
    assert ("pair q::torch-dynamic-int8 is 'pass' in run.json, but its divergence.csv rows and "
            "SQNR record give 'DIVERGED'") in err, err
    _edit_pair(shards, "q", "torch-dynamic-int8", quantization=None)
    err = _merge_error(shards, tmp_path, capsys)
    assert "has quantization rows (sqnr_db) but no SQNR record in run.json" in err, err
