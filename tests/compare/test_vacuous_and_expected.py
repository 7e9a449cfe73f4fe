"""Nothing vacuous, and known upstream bugs (issue 30, items 4 and 5).

- The blind-spot check judges each compared adapter's effective tolerance: a per-adapter
  ``atol: 1e300`` makes the case blind to every plausible mistake, a case error (exit 1) unless
  the case says ``allow_vacuous: true``, when it is a warning in summary.md and index.html.
- ``expected: {ADAPTER: {verdict: DIVERGED, upstream: ID}}``: a pair that diverges as expected
  is a known upstream bug (exit 0); one that passes "looks fixed" (exit 1).
- ``merge`` of reports that compared nothing exits 1, as ``run`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness import blind, compare
from harness.adapters import get_adapter
from harness.cli import main
from harness.spec import Case

BASE = "name: {name}\ncell: lstm\ninput_size: 3\nhidden_size: 4\nseq_len: 6\ndtype: float32\n"


def _run(tmp_path: Path, name: str, extra: str, adapters: str = "reference,noise-floor"):
    case = tmp_path / f"{name}.yaml"
    case.write_text(BASE.format(name=name) + extra)
    out = tmp_path / f"report-{name}"
    code = main(["run", str(case), "--adapters", adapters, "--out", str(out), "--quiet"])
    return code, out


def test_the_check_judges_each_adapters_own_tolerance():
    case = Case(name="c", cell="lstm", input_size=3, hidden_size=4, seq_len=6,
                tolerance={"adapters": {"noise-floor": {"atol": 1e300}}})
    loose = blind.check(case, [get_adapter("noise-floor")])
    assert loose.vacuous and blind.VACUOUS in loose.error and "atol 1e+300" in loose.error
    assert not blind.check(case).vacuous  # the default tolerance sees every mistake
    both = blind.check(case, [get_adapter("noise-floor"), get_adapter("torch-cpu")])
    assert [j.adapters for j in both.vacuous] == [("noise-floor",)]


def test_a_per_adapter_tolerance_that_sees_nothing_is_a_case_error(tmp_path, capsys):
    code, out = _run(tmp_path, "loose", "tolerance: {adapters: {noise-floor: {atol: 1.0e300}}}\n")
    assert code == 1
    # the last line says why the run failed, beside counts that are all passes
    assert capsys.readouterr().out.strip().splitlines()[-1].split("; report in")[0].endswith(
        "1 baseline, 1 pass; 1 vacuous case")
    doc = json.loads((out / "run.json").read_text())
    assert blind.VACUOUS in doc["case_errors"]["loose"]
    assert {p["status"] for p in doc["pairs"]} == {compare.BASELINE, compare.PASS}
    for f in ("summary.md", "index.html"):
        assert "Case errors" in (out / f).read_text()
        assert blind.VACUOUS in (out / f).read_text()


def test_allow_vacuous_turns_the_error_into_a_warning(tmp_path):
    code, out = _run(tmp_path, "meant", "allow_vacuous: true\n"
                     "tolerance: {adapters: {noise-floor: {atol: 1.0e300}}}\n")
    assert code == 0
    assert "**Warning**: Blind to (" in (out / "summary.md").read_text()
    assert "intended: allow_vacuous" in (out / "summary.md").read_text()
    assert '<p class="warning">Warning: Blind to' in (out / "index.html").read_text()
    assert "meant" in json.loads((out / "run.json").read_text())["blind_spots"]


def test_a_known_upstream_bug_does_not_fail_the_run(tmp_path):
    # noise-floor computes in float32: with a zero tolerance it diverges, standing in for a
    # framework with an open bug
    code, out = _run(tmp_path, "known", "tolerance: {adapters: {noise-floor: {atol: 0, rtol: 0}}}\n"
                     "expected: {noise-floor: {verdict: DIVERGED, upstream: example/fw#123}}\n")
    assert code == 0
    pair = next(p for p in json.loads((out / "run.json").read_text())["pairs"]
                if p["adapter"] == "noise-floor")
    assert pair["status"] == compare.KNOWN_BUG
    assert "known upstream bug example/fw#123" in pair["reason"]
    assert compare.KNOWN_BUG in (out / "summary.md").read_text()
    # the grid tells a known bug from a pair that did not run
    html = (out / "index.html").read_text()
    assert 'class="known"' in html and ".known {" in html


def test_an_expected_divergence_that_passes_looks_fixed_and_fails(tmp_path):
    code, out = _run(tmp_path, "fixed",
                     "expected: {noise-floor: {verdict: DIVERGED, upstream: example/fw#123}}\n")
    assert code == 1
    pair = next(p for p in json.loads((out / "run.json").read_text())["pairs"]
                if p["adapter"] == "noise-floor")
    assert pair["status"] == compare.LOOKS_FIXED
    assert "remove expected.noise-floor" in pair["reason"]


def test_merge_of_reports_that_compared_nothing_exits_1(tmp_path, capsys):
    # two shards of a run whose only other adapter the case excludes: nothing compared
    case = tmp_path / "nothing.yaml"
    case.write_text(BASE.format(name="nothing") + "exclude: [noise-floor]\n")
    shards = [str(tmp_path / f"s{k}") for k in (1, 2)]
    for k, out in enumerate(shards, 1):
        assert main(["run", str(case), "--adapters", "reference,noise-floor", "--out", out,
                     "--quiet", "--shard", f"{k}/2"]) == 0  # a shard alone may compare nothing
    assert main(["merge", str(tmp_path / "merged"), *shards]) == 1
    assert "nothing was compared" in capsys.readouterr().err


WHEN = ("expected:\n"
        "  noise-floor: {verdict: DIVERGED, upstream: example/fw#123, when: {%s: gru}}\n"
        "matrix:\n  cell: [lstm, gru]\n")


def test_expected_when_holds_for_the_matching_matrix_entries_only(tmp_path):
    from harness.cases import load_cases

    path = tmp_path / "when.yaml"
    path.write_text("name: when\ninput_size: 3\nhidden_size: 4\n" + WHEN % "cell")
    by_cell = {c.cell: c.expected for c in load_cases(path)}
    assert by_cell["gru"]["noise-floor"].upstream == "example/fw#123"
    assert by_cell["lstm"] == {}


def test_expected_when_with_an_unknown_key_is_exit_2_with_the_line(tmp_path, capsys):
    path = tmp_path / "bad-when.yaml"
    path.write_text("name: bad-when\ninput_size: 3\nhidden_size: 4\n" + WHEN % "cel")
    assert main(["run", str(path), "--adapters", "reference,noise-floor",
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad-when.yaml:5: expected.noise-floor.when.cel: not a case key" in err
    assert "did you mean 'cell'?" in err


def test_expected_when_compares_booleans_type_strictly(tmp_path):
    import pytest

    from harness.cases import load_cases
    from harness.errors import CaseError

    path = tmp_path / "when-bool.yaml"
    path.write_text("name: wb\ncell: lstm\ninput_size: 3\nhidden_size: 4\nmatrix:\n"
                    "  seed: [0, 1]\nexpected:\n  noise-floor: {verdict: DIVERGED, "
                    "upstream: example/fw#1, when: {seed: true}}\n")
    # `seed: true` is not `seed: 1` (Python's True == 1): it matches none of the cases
    with pytest.raises(CaseError, match=r"when-bool.yaml:8: expected.noise-floor.when: matches "
                                        r"none of the file's cases"):
        load_cases(path)
    path.write_text(path.read_text().replace("seed: true", "seed: 1"))
    assert {c.seed: set(c.expected) for c in load_cases(path)} == {0: set(), 1: {"noise-floor"}}


def test_the_references_alone_are_a_vacuous_run(tmp_path, capsys):
    # the noise floor is within its own floor by construction: no framework was tested
    code, out = _run(tmp_path, "alone", "")
    assert code == 1
    captured = capsys.readouterr()
    assert "vacuous: no framework compared" in captured.out.strip().splitlines()[-1]
    assert "rnn-harness: vacuous: no framework was compared" in captured.err
    assert "**Vacuous**: no framework was compared" in (out / "summary.md").read_text()
    # merged shards of such a run: the same
    case = tmp_path / "alone.yaml"
    shards = [str(tmp_path / f"s{k}") for k in (1, 2)]
    for k, shard in enumerate(shards, 1):
        assert main(["run", str(case), "--adapters", "reference,noise-floor", "--out", shard,
                     "--quiet", "--shard", f"{k}/2"]) == 0
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "merged"), *shards]) == 1
    assert "rnn-harness: vacuous" in capsys.readouterr().err


def test_an_upstream_id_with_escape_sequences_is_written_escaped(tmp_path):
    # YAML's "\e" is ESC: a window title and a cleared screen for whoever cats summary.md
    code, out = _run(tmp_path, "esc", "tolerance: {adapters: {noise-floor: {atol: 0, rtol: 0}}}\n"
                     "expected: {noise-floor: {verdict: DIVERGED, "
                     'upstream: "x#1\\e]0;t\\a\\e[2J"}}\n')
    assert code == 0
    summary = (out / "summary.md").read_text()
    assert "known upstream bug x#1\\x1b]0;t\\x07\\x1b[2J" in summary
    assert "\x1b" not in summary and "\x07" not in summary
