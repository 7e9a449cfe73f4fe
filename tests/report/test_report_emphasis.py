"""What summary.md and index.html put first: the pairs a case ran, not the ones it did not.

Built from a run of the harness's own references on tiny cases (no framework imported) and
pairs added as data: a case's not-selected pairs are one count line, not-applicable pairs a
line per reason; the plots line and the progress line say what was drawn; an unnamed
named-only adapter's grid cells say why they are empty; the reference column is gone where it
compared nothing; versions apart from settings; a quantized pair's worst row in output steps
with its cost; zero initial states a note, not a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import pytest
from support.case_factory import case_maker

from harness import blind, compare, runner
from harness.adapters import get_adapter
from harness.judges import CostFigures, Figures, Verdict
from harness.pairs import not_selected_reason
from harness.report import write_report
from harness.report.html import html_report
from harness.report.run_json import run_record
from harness.report.summary import pair_row, summary_markdown
from harness.results import PairResult

make = case_maker(seed=5)
NA_ADAPTERS = ["onnxruntime", "openvino", "onnx-reference"]  # never run here: data only


@pytest.fixture(scope="module")
def result():
    """Two cases through the references; the second selects only noise-floor (so the
    reference is not selected there), and three not-applicable pairs per case are added with
    two reasons, and a named-only adapter's pair in the first case only."""
    cases = [make(name="plain"), make(name="picky", adapters=["noise-floor"])]
    adapters = [get_adapter("reference"), get_adapter("noise-floor")]
    r = runner.run(cases, adapters)
    extra = [get_adapter(n) for n in NA_ADAPTERS] + [get_adapter("executorch")]
    r.adapters = r.adapters + extra
    for case in cases:
        r.pairs += [PairResult(case.name, "onnxruntime", compare.NOT_APPLICABLE,
                               "onnxruntime: no peepholes"),
                    PairResult(case.name, "openvino", compare.NOT_APPLICABLE, "no peepholes"),
                    PairResult(case.name, "onnx-reference", compare.NOT_APPLICABLE,
                               "float64 only")]
    # a named-only adapter named where a case names it: "plain" has a pair, "picky" none
    r.pairs.append(PairResult("plain", "executorch", compare.UNAVAILABLE, "not installed"))
    return r


def _section(text: str, case: str) -> str:
    return text.split(f"\n## {case}\n")[1].split("\n## ")[0]


def test_not_selected_pairs_are_a_count_line_and_no_rows(result, tmp_path):
    text = summary_markdown(result)
    picky = _section(text, "picky")
    rows = [line for line in picky.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows] == ["adapter", "noise-floor"]
    # the reference (not in the case's adapters:) and executorch (named-only, never named)
    assert "2 adapters not selected by the case (adapters/exclude): reference, executorch." \
        in picky
    assert compare.NOT_SELECTED not in "\n".join(rows)
    html = html_report(result, tmp_path)
    assert "2 adapters not selected by the case (adapters/exclude): reference, executorch." \
        in html
    assert html.count("<td>reference</td>") == 1  # a row in "plain" only


def test_not_applicable_pairs_group_under_a_line_per_reason(result, tmp_path):
    plain = _section(summary_markdown(result), "plain")
    assert "- `onnxruntime`, `openvino`: no peepholes" in plain
    assert "- `onnx-reference`: float64 only" in plain
    rows = [line for line in plain.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows] == [
        "adapter", "reference", "noise-floor", "executorch"]
    html = html_report(result, tmp_path).split('id="case-plain"')[1].split("</section>")[0]
    assert "<li><code>onnxruntime</code>, <code>openvino</code>: no peepholes</li>" in html
    assert html.count("no peepholes") == 1 and html.count("float64 only") == 1


def test_the_progress_line_says_which_plots_not_that_plotting_failed(result, tmp_path):
    lines: list[str] = []
    write_report(result, tmp_path / "r", progress=lines.append)
    assert "index.html (plots of the pairs that did not pass)" in lines
    assert not any("plots: failed" in line for line in lines)


def test_an_all_pass_report_with_quantized_pairs_says_no_pair_failed(result, tmp_path):
    noise = next(p for p in result.pairs if p.adapter == "noise-floor" and p.case == "plain")
    rows = noise.rows.copy()
    rows = rows.assign(**dict.fromkeys(CostFigures.columns, float("nan")))
    rows["sqnr_db"] = 40.0  # as a quantized pair's y rows carry it
    q = PairResult("plain", "onnxruntime", compare.PASS, "", rows=rows,
                   verdict=Verdict("quantized", compare.PASS, rows=rows,
                                   figures=CostFigures(40.0, 41.0, 0.03)))
    r = type(result)(result.cases, result.adapters,
                     [p for p in result.pairs if p.adapter != "onnxruntime"] + [q])
    html = html_report(r, tmp_path)
    line = re.search(r'<p id="plots">(.*?)</p>', html).group(1)
    assert "did not pass" in line and "the 1 pair" not in line and "the 2 pairs" not in line
    assert "quantization cost of the 1 quantized pair" in line


def test_grid_cells_of_an_unnamed_named_only_adapter_and_no_reference_column(result, tmp_path):
    html = html_report(result, tmp_path)
    grid = html.split('<div class="grid">')[1].split("</table>")[0]
    head = re.findall(r"<th>([^<]*)</th>", grid.split("</tr>")[0])
    # the reference is the baseline or not selected everywhere: no column reading n/a
    assert "reference" not in head and "executorch" in head
    cells = re.findall(r"<td[^>]*>", grid)
    empty = [c for c in cells if 'title=""' in c or c == "<td>"]
    assert not empty, empty
    executorch = [c for c in re.findall(r'<td class="na" title="([^"]*)"', grid)
                  if "executorch runs when named" in c]
    assert len(executorch) == 1  # "picky", which did not name it


def test_versions_and_settings_apart(result, tmp_path):
    result.environments["executorch"] = {
        "available": True, "reason": None, "precision_flags": {},
        "versions": {"torch": "2.13.0", "executorch": "1.5.1", "keras_backend": "jax",
                     "unroll": "True", "torch_threads": "2"}}
    try:
        record = run_record(result)
        assert {"torch", "executorch"} <= set(record.versions)
        assert not {"keras_backend", "unroll", "torch_threads"} & set(record.versions)
        out = tmp_path / "r"
        write_report(result, out, plots="none")
        html = (out / "index.html").read_text()
        versions = html.split("<h3>Versions</h3>")[1].split("<h3>")[0]
        settings = html.split("<h3>Adapter settings</h3>")[1].split("<h3>")[0]
        assert "keras_backend" not in versions and "unroll" not in versions
        assert "<td>executorch</td><td>keras_backend</td><td>jax</td>" in settings
        assert "<td>unroll</td><td>True</td>" in settings
    finally:
        del result.environments["executorch"]


def test_a_quantized_pair_in_output_steps_with_its_cost():
    rows = pd.DataFrame([{"output": "y", "layer": 0, "direction": 0, "t": 3, "mode": "free",
                          "max_abs": 0.0078, "max_rel": 0.01, "max_ulp": 1e5, "tol_ratio": 0.5,
                          "floor_ratio": 2.0, "verdict": compare.PASS, "sqnr_db": 38.0}])
    p = PairResult("q", "litert-int8", compare.PASS, "", rows=rows,
                   verdict=Verdict("quantized", compare.PASS, rows=rows,
                                   figures=CostFigures(38.0, 39.25, 0.031)))
    worst = pair_row(p)[2]
    assert "0.5x of 2 steps against the integer-aware reference" in worst
    assert "1.2 dB below the ideal" in worst and "largest error 0.031 against float64" in worst
    assert "x tol" not in worst


def test_zero_initial_states_are_a_note_not_a_warning(result):
    plain = result.blind["plain"]
    assert "(h0, c0)" not in plain.warning and plain.notes == [blind.ZERO_STATES_NOTE]
    text = _section(summary_markdown(result), "plain")
    assert text.count("does not exercise initial states") == 1
    assert "**Warning**" not in text
    random_states = blind.check(make(name="rs", initial_state="random"))
    assert random_states.notes == [] and "(h0, c0)" not in random_states.note


def test_the_summary_is_not_buried_by_not_selected_pairs(result):
    """Twenty more not-selected pairs add one line, not twenty rows."""
    before = summary_markdown(result)
    more = [get_adapter(n) for n in ("tf-block", "keras", "flax-linen", "mlx")]
    extra = [PairResult("plain", a.name, compare.NOT_APPLICABLE,
                        not_selected_reason(a)) for a in more]
    r = type(result)(result.cases, result.adapters + more, result.pairs + extra,
                     blind=result.blind)
    after = summary_markdown(r)
    assert len(after.splitlines()) == len(before.splitlines()) + 2  # the line and a blank
    assert "4 adapters not selected by the case" in _section(after, "plain")


@dataclass(frozen=True)
class _Scored(Figures):
    plots: ClassVar[tuple[str, ...]] = ("cost",)
    always_plot_words: ClassVar[tuple[str, str]] = ("the dummy score", "scored pair")


def test_the_plots_line_says_what_the_figures_call_their_plots(result, tmp_path):
    """The words for the plots drawn always are the figures' (Figures.always_plot_words): the
    report names no kind of pair itself."""
    noise = [p for p in result.pairs if p.adapter == "noise-floor" and p.has_rows]
    assert noise
    scored = [PairResult(p.case, "onnxruntime", compare.PASS, "", rows=p.rows,
                         verdict=Verdict("scored", compare.PASS, rows=p.rows,
                                         figures=_Scored()))
              for p in noise]
    r = type(result)(result.cases, result.adapters,
                     [p for p in result.pairs if p.adapter != "onnxruntime"] + scored)
    line = re.search(r'<p id="plots">(.*?)</p>', html_report(r, tmp_path)).group(1)
    n = len(scored)
    assert f"the dummy score of the {n} scored pair{'s' if n > 1 else ''}" in line, line
    assert "quantiz" not in line
