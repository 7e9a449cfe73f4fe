"""index.html: the report for a person, a static page that opens from disk.

Sections: an overview matrix (case x adapter verdicts), per case the summary table with its
per-timestep plots (``plots/*.png``, drawn by :mod:`harness.report.html_plots`) and, for
gradient cases, the gradient plots and a table of each gradient output's worst row, the layout
mapping tables (rendered from :func:`harness.report.layouts_md.mapping_markdown`, the same text
as layouts.md), and the environment from run.json. It renders PairResults and their rows;
verdicts come from :mod:`harness.compare` through them and are never recomputed here.
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

import pandas as pd

from harness import blind, compare
from harness.report.folder import slug
from harness.report.html_plots import draw_plots, pair_figures
from harness.report.layouts_md import mapping_markdown
from harness.report.read_back import read_run
from harness.report.run_json import split_versions
from harness.report.summary import _case_line as case_line
from harness.report.summary import (
    case_pairs,
    headers,
    not_selected,
    pair_reason,
    pair_row,
    split_rows,
)
from harness.results import PairResult, RunResult
from harness.spec import Case

STATUS_CLASS = {
    compare.PASS: "pass", compare.DIVERGED: "diverged", compare.ERROR: "error",
    compare.NOT_APPLICABLE: "na", compare.UNAVAILABLE: "unavailable", compare.BASELINE: "baseline",
    compare.KNOWN_BUG: "known", compare.LOOKS_FIXED: "error",
}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 2em 3em;
       color: #1d232a; max-width: 1250px; }
h1 { font-size: 1.5em; margin: 1em 0 .2em; }
h2 { border-bottom: 1px solid #ccd; padding-bottom: .2em; margin-top: 2em; }
h3 { margin: 1.6em 0 .3em; } h4 { margin: 1.2em 0 .3em; font-size: 1em; }
code { font: 12px ui-monospace, Menlo, Consolas, monospace; background: #f1f3f5; padding: 0 .2em; }
table { border-collapse: collapse; margin: .4em 0 1em; font-size: 13px; }
th, td { border: 1px solid #d0d5dc; padding: .2em .5em; text-align: left; vertical-align: top; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { background: #d8f0dc; } .diverged { background: #f6c9cc; font-weight: 600; }
.error { background: #e7a1a6; font-weight: 600; }
.warning { background: #fff3cd; padding: 4px; } .na { background: #eceef0; color: #555; }
.known { background: repeating-linear-gradient(135deg, #f6e3b4 0 6px, #fbf1d6 6px 12px); }
.unavailable { background: #fbeec6; } .baseline { background: #dde8f7; }
.meta { color: #555; } .badge { display: inline-block; padding: 0 .5em; margin-right: .3em;
  border-radius: 3px; border: 1px solid #c5cad1; }
/* the verdict grid: every adapter column visible in a 1400 px window (adapter names written
   bottom to top, so a column is as wide as its cells, two short lines); wider grids scroll
   sideways with the case column kept in view */
.grid { width: calc(100vw - 4em); max-width: max-content; overflow-x: auto; }
table.matrix { margin: 0; }
table.matrix td { text-align: center; padding: .15em .1em; line-height: 1.25; font-size: 10px; }
table.matrix a { color: inherit; }
table.matrix th { font-size: 12px; }
table.matrix tr:first-child th + th { writing-mode: vertical-rl; transform: rotate(180deg);
  white-space: nowrap; text-align: left; vertical-align: bottom; padding: .4em .15em; }
table.matrix th:first-child { position: sticky; left: 0; z-index: 1; background: #eef1f5;
  text-align: left; max-width: 14em; }
.reason { color: #444; font-size: 12px; max-width: 38em; }
figure { display: inline-block; vertical-align: top; margin: .3em .6em .8em 0; }
figcaption { font-size: 12px; color: #555; }
img { max-width: 100%; border: 1px solid #e2e5e9; }
details { margin: .3em 0; } summary { cursor: pointer; }
nav a { margin-right: 1em; }
"""


_slug = slug


def _inline(text: str) -> str:
    """Escape, then render markdown `code` spans."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escape(text))


def markdown_tables_html(markdown: str) -> str:
    """The small markdown subset layouts.md uses: ``###`` headings, GitHub tables, paragraphs."""
    out, table = [], []

    def flush() -> None:
        if not table:
            return
        head, *body = table
        out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
        out.extend("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
        out.append("</table>")
        table.clear()

    for line in markdown.splitlines():
        s = line.strip()
        if s.startswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                table.append(cells)
            continue
        flush()
        if s.startswith("#"):
            level = min(6, len(s) - len(s.lstrip("#")) + 1)
            out.append(f"<h{level}>{_inline(s.lstrip('#').strip())}</h{level}>")
        elif s:
            out.append(f"<p>{_inline(s)}</p>")
    flush()
    return "\n".join(out)


def _table(headers: list[str], rows: list[list[str]], classes: list[list[str]] | None = None,
           css: str = "") -> str:
    """An HTML table; cell text is escaped, ``classes`` gives a class per cell (or "")."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    parts = [f'<table class="{css}"><tr>{head}</tr>']
    for i, row in enumerate(rows):
        cls = classes[i] if classes else [""] * len(row)
        parts.append("<tr>" + "".join(f'<td class="{c}">{escape(str(v))}</td>' if c else
                                      f"<td>{escape(str(v))}</td>"
                                      for v, c in zip(row, cls, strict=True)) + "</tr>")
    parts.append("</table>")
    return "\n".join(parts)


# the grid's short words for the long verdicts (the hover and the legend under it say them whole)
GRID_WORDS = {compare.NOT_APPLICABLE: "n/a", compare.UNAVAILABLE: "unavail.",
              compare.KNOWN_BUG: "known bug"}


def _matrix_cell(p: PairResult, gradients: bool = False, dtype: str = "float32") -> str:
    lines = [GRID_WORDS.get(p.status, p.status)]
    w = p.worst
    if w is not None:
        if dtype == "float64" and p.status == compare.PASS:
            # float64's noise floor is zero and its ratios are ~1e-15: ulp say more
            lines[0] += f", {w['max_ulp']:.3g} ulp"
        else:
            lines.append(f"{w['tol_ratio']:.2g}× tol")
        if gradients and split_rows(p.rows)[1].empty:
            lines.append("(forward only)")  # no backward pass: the reason says why
    reason = pair_reason(p)
    title = escape(reason or (f"worst max_abs {w['max_abs']:.3g}" if w is not None else ""))
    return (f'<td class="{STATUS_CLASS.get(p.status, "")}" title="{title}">'
            f'<a href="#{_slug("case-" + p.case)}">'
            + "<br>".join(escape(x) for x in lines) + "</a></td>")


NOT_SELECTED_WORD = "–"  # the grid's cell of an adapter the case did not select


def _not_selected_cell(case: str, why: str) -> str:
    return (f'<td class="na" title="{escape(why)}"><a href="#{_slug("case-" + case)}">'
            f"{NOT_SELECTED_WORD}</a></td>")


def _missing_cell(case: str, adapter) -> str:
    """The cell of an adapter with no pair in the case: a named-only adapter the case did not
    name (it runs where named), or a pair another shard ran."""
    why = getattr(adapter, "named_only", None)
    if why is not None:
        return _not_selected_cell(case, f"{compare.NOT_SELECTED}: {adapter.name} runs when "
                                        f"named (--adapters or the case's adapters:): {why}")
    return f'<td title="{escape(adapter.name)}: no pair of this case in the report"></td>'


def overview(result: RunResult) -> str:
    """Cases down, adapters across (adapters that compared nothing anywhere, the baseline or
    not selected in every case, are left out)."""
    adapters = [a for a in result.adapters
                if any(p.adapter == a.name and p.status != compare.BASELINE and not not_selected(p)
                       for p in result.pairs)]
    by = {(p.case, p.adapter): p for p in result.pairs}
    parts = ['<div class="grid"><table class="matrix"><tr><th>case</th>'
             + "".join(f"<th>{escape(a.name)}</th>" for a in adapters)
             + "</tr>"]
    for case in result.cases:
        cells = []
        for a in adapters:
            p = by.get((case.name, a.name))
            if p is None:
                cells.append(_missing_cell(case.name, a))
            elif not_selected(p):
                cells.append(_not_selected_cell(case.name, p.reason))
            else:
                cells.append(_matrix_cell(p, case.gradients, case.dtype))
        parts.append(f'<tr><th><a href="#{_slug("case-" + case.name)}">{escape(case.name)}</a></th>'
                     + "".join(cells) + "</tr>")
    parts.append("</table></div>")
    parts.append('<p class="meta">Each cell: verdict (n/a: not applicable, unavail.: '
                 f"unavailable here, known bug: a known upstream bug, {NOT_SELECTED_WORD}: "
                 "not selected by the case) and the worst error in "
                 "units of the tolerance (≤ 1 passes), gradients included; a passing float64 "
                 "pair: its worst error in ulp (units in the last place of float64); "
                 "\"forward only\": a gradient case whose backward pass the adapter cannot run. "
                 "Hover for the reason "
                 "of not-applicable, not selected, unavailable, forward-only, errors and where a "
                 "DIVERGED pair diverged first.</p>")
    return "\n".join(parts)


def _step_table(p: PairResult) -> str:
    """The pair's step-local rows (:mod:`harness.steplocal`): the worst step of each layer and
    direction, in a table; empty when step mode did not run."""
    steps = compare.of_mode(p.rows, compare.STEP)
    if steps is None or steps.empty:
        return ""
    worst = steps.loc[steps.groupby(["layer", "direction"], sort=True)["tol_ratio"].idxmax()]
    rows = [[compare.where(w), f"{w['max_abs']:.2e}", f"{w['tol_ratio']:.3g}",
             f"{w['floor_ratio']:.3g}", w["verdict"]] for _, w in worst.iterrows()]
    classes = [["", "num", "num", "num", STATUS_CLASS.get(w["verdict"], "")]
               for _, w in worst.iterrows()]
    n_bad = int(compare.diverged(steps["verdict"]).sum())
    table = _table(["worst step", "max_abs", "x tol", "x noise floor", "verdict"], rows, classes)
    return (f"<details{' open' if n_bad else ''}><summary>{escape(p.adapter)}: step-local rows "
            f"(one step from the reference's state), the worst of each layer and direction "
            f"({len(steps)} rows, {n_bad} beyond tolerance)</summary>\n{table}</details>")


def _gradient_table(p: PairResult) -> str:
    """The worst row of each gradient output (dx, dh0, dc0, then each parameter block in
    canonical order), folded; open when one of them is beyond tolerance."""
    grads = split_rows(p.rows)[1]
    if grads is None or grads.empty:
        return ""
    worst = grads.loc[grads.groupby("output", sort=False)["tol_ratio"].idxmax()]
    n_bad = int(compare.diverged(grads["verdict"]).sum())

    def num(v: float, fmt: str) -> str:
        return "" if pd.isna(v) else format(v, fmt)

    rows = [[w["output"], compare.where(w), num(w["max_abs"], ".2e"), num(w["max_rel"], ".2e"),
             num(w["max_ulp"], ".3g"), num(w["tol_ratio"], ".3g"), num(w["floor_ratio"], ".3g"),
             w["verdict"]] for _, w in worst.iterrows()]
    classes = [["", "", "num", "num", "num", "num", "num", STATUS_CLASS.get(w["verdict"], "")]
               for _, w in worst.iterrows()]
    table = _table(["gradient", "worst at", "max_abs", "max_rel", "max_ulp", "x tol",
                    "x noise floor", "verdict"], rows, classes)
    return (f"<details{' open' if n_bad else ''}><summary>{escape(p.adapter)}: gradient rows, the "
            f"worst of each output ({len(grads)} rows, {n_bad} beyond tolerance)</summary>\n"
            f"{table}</details>")


def _environment(run: dict) -> str:
    if not run:
        return "<p>run.json was not found.</p>"
    parts = [_table(["what", "value"], [["created", run.get("created", "")],
                                        ["platform", run.get("platform", "")],
                                        ["machine", run.get("machine", "")],
                                        ["seconds", run.get("seconds", "")]])]
    parts.append("<h3>Versions</h3>")
    versions, loose = split_versions(run.get("versions", {}))
    parts.append(_table(["package", "version"], [[k, v] for k, v in versions.items()]))
    settings = [[n, k, v] for n, a in run.get("adapters", {}).items()
                for k, v in split_versions((a.get("environment") or {}).get("versions")
                                            or {})[1].items()]
    named = {k for _, k, _ in settings}
    # a run.json of an earlier rnn-harness mixed them into its versions
    settings += [["", k, v] for k, v in loose.items() if k not in named]
    if settings:
        parts.append("<h3>Adapter settings</h3>")
        parts.append(_table(["adapter", "setting", "value"], settings))
    flags = run.get("precision_flags", {})
    if flags:
        parts.append("<h3>Precision flags and devices</h3>")
        parts.append(_table(["flag", "value"], [[k, json.dumps(v)] for k, v in flags.items()]))
    adapters = run.get("adapters", {})
    if adapters:
        parts.append("<h3>Adapters</h3>")
        rows = [[n, a.get("device", ""), _available(a),
                 "; ".join(filter(None, [a.get("reason"), _when_named(a.get("named_only"))]))]
                for n, a in adapters.items()]
        cls = [["", "", "pass" if a.get("available") else "unavailable", ""]
               for a in adapters.values()]
        # named-only adapters the default selection left out (Adapter.named_only)
        left = run.get("left_out", {})
        rows += [[n, "", "not run", _when_named(why)] for n, why in left.items()]
        cls += [["", "", "na", ""] for _ in left]
        parts.append(_table(["adapter", "device", "available", "reason"], rows, cls))
    cases = run.get("cases", {})
    if cases:
        parts.append("<h3>Cases</h3>")
        parts.append(_table(["case", "file", "dtype", "seed", "prepare s"],
                            [[n, c.get("file", ""), c.get("dtype", ""), c.get("seed", ""),
                              c.get("prepare_seconds", "")] for n, c in cases.items()]))
    return "\n".join(parts)


def _available(adapter: dict) -> str:
    """The available column: "installed" for an adapter no pair reached, whose framework the
    run did not import (run.json's ``checked: false``)."""
    if not adapter.get("available"):
        return "no"
    return "installed" if adapter.get("checked") is False else "yes"


def _when_named(why: str | None) -> str:
    return f"run when named: {why}" if why else ""


def _layouts(result: RunResult) -> str:
    """The mapping tables of the layouts that ran, per case, folded."""
    adapters = {a.name: a for a in result.adapters}
    cases = {c.name: c for c in result.cases}
    seen, parts = set(), []
    for p in result.pairs:
        layout = adapters[p.adapter].layout
        if (p.rows is None and p.status != compare.BASELINE) or layout is None \
                or layout.name == "canonical" or (layout.name, p.case) in seen:
            continue
        seen.add((layout.name, p.case))
        tables = markdown_tables_html(mapping_markdown(layout, cases[p.case]))
        parts.append(f"<details><summary><code>{escape(layout.name)}</code> — "
                     f"{escape(p.case)}</summary>\n{tables}</details>")
    return "\n".join(parts) or "<p>No layout ran.</p>"



def html_report(result: RunResult, out: Path, plots: str = "failed") -> str:
    """The text of index.html; writes the plots of the pairs ``plots`` selects
    (:func:`harness.report.html_plots.plotted`) into ``out/plots/`` (old PNGs there are removed,
    so a reused folder shows only this run). Reads ``out/run.json`` for the environment."""
    out = Path(out)
    folder = out / "plots"
    if folder.is_dir():
        for old in folder.glob("*.png"):
            old.unlink()
    run_path = out / "run.json"
    run = read_run(run_path).model_dump(mode="json", exclude_unset=True) \
        if run_path.is_file() else {}
    jobs, drawn, plots_line = draw_plots(result, folder, plots)
    body = _head(result, run, out)
    body += ['<h2 id="overview">Overview</h2>', overview(result), '<h2 id="cases">Cases</h2>',
             f'<p id="plots">{plots_line}</p>', f'<p class="meta">{PLOTS_LEGEND}</p>']
    for case in result.cases:
        pairs = [p for p in result.pairs if p.case == case.name]
        body.append(_case_section(result, case, pairs))
        body += [pair_figures(p, jobs.get(id(p)), drawn.get(id(p), ())) + _gradient_table(p)
                 + _step_table(p) for p in pairs]
        body.append("</section>")
    body += ['<h2 id="layouts">Layout mapping tables</h2>',
             "<p>Which slice of which native tensor holds which canonical block, at each case's "
             "sizes (the same tables as layouts.md).</p>", _layouts(result),
             '<h2 id="environment">Environment</h2>', _environment(run)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>rnn-harness report</title><style>{CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


PLOTS_LEGEND = (
    "Plots: max |adapter − reference| per timestep on a log scale, a "
    "line per layer and direction of <code>y</code> (every layer when the adapter "
    "returned them), the final states <code>h_n</code>/<code>c_n</code> at the right; "
    "grey area: the noise floor (the reference rounded to the case dtype); dashed red: "
    "the tolerance's atol; red crosses: rows beyond tolerance. Heatmaps: log10 max_abs "
    "of each layer's <code>y</code> for stacks that returned every layer. Gradient cases "
    "(<code>gradients: true</code>): <code>dx</code> per timestep with the initial-state "
    "gradients <code>dh0</code>/<code>dc0</code> at the left, a layer/direction x "
    "block map of the parameter gradients (<code>dW_i</code> … <code>dWp</code>), and "
    "the worst row of each gradient output. Pairs without rows have no plot.")


def _head(result: RunResult, run: dict, out: Path) -> list[str]:
    """The page's title, counts by verdict, navigation, case errors and the errors.log link."""
    counts = pd.Series([p.status for p in result.pairs], dtype=object).value_counts().to_dict()
    badges = " ".join(f'<span class="badge {STATUS_CLASS.get(s, "")}">{n} {escape(s)}</span>'
                      for s, n in sorted(counts.items()))
    body = ["<h1>rnn-harness conformance report</h1>",
            f'<p class="meta">{len(result.cases)} case(s) x {len(result.adapters)} adapter(s), '
            f"{result.seconds:.1f} s, {escape(str(run.get('created', '')))} on "
            f"{escape(str(run.get('platform', '')))}</p>",
            f"<p>{badges}</p>",
            '<nav><a href="#overview">Overview</a><a href="#cases">Cases</a>'
            '<a href="#layouts">Layout mapping tables</a><a href="#environment">Environment</a>'
            '<a href="summary.md">summary.md</a><a href="divergence.csv">divergence.csv</a></nav>']
    if result.case_errors:
        body.append("<h2>Case errors</h2><ul>"
                    + "".join(f"<li><code>{escape(n)}</code>: {escape(e)}</li>"
                              for n, e in result.case_errors.items()) + "</ul>")
    if (out / "errors.log").is_file() or any(p.detail for p in result.pairs):
        body.append('<p>Adapter tracebacks: <a href="errors.log">errors.log</a></p>')
    return body


def _case_section(result: RunResult, case: Case, pairs: list[PairResult]) -> str:
    """The opening of a case's section: its summary table, the adapters not applicable or not
    selected, and its blind-spot warning and notes (the pairs' plots follow)."""
    body = [f'<section id="{_slug("case-" + case.name)}"><h3>{escape(case.name)}</h3>']
    source = f" — <code>{escape(str(case.source))}</code>" if case.source else ""
    body.append(f'<p class="meta">{escape(case_line(case))}{source}</p>')
    laid = case_pairs(result, case, pairs)
    rows = [pair_row(p, case.gradients, case.dtype) for p in laid.shown]
    classes = [["", STATUS_CLASS.get(p.status, ""), "num", "num", ""]
               + (["num"] if case.gradients else []) + ["num", "reason"] for p in laid.shown]
    if rows:
        body.append(_table(headers(case.gradients), rows, classes))
    if laid.not_applicable:
        body.append(f'<p class="na">{escape(compare.NOT_APPLICABLE)}:</p><ul>' + "".join(
            f"<li>{', '.join(f'<code>{escape(a)}</code>' for a in adapters)}: "
            f"{escape(reason)}</li>" for reason, adapters in laid.not_applicable.items())
            + "</ul>")
    if laid.not_selected:
        body.append(f'<p class="meta">{escape(laid.not_selected_line)}.</p>')
    check = blind.of_result(result, case)
    if check is not None and check.warning:  # a pass here proves less: say so by the table
        body.append(f'<p class="warning">Warning: {escape(check.warning)}</p>')
    if check is not None:
        body += [f'<p class="meta">Note: {_inline(n)}.</p>' for n in check.notes]
    return "\n".join(body)
