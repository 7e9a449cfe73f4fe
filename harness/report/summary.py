"""summary.md: a table per case: adapter, verdict, worst error, first diverging step, reason.

The table has a row for each pair that ran or could have: the not-applicable pairs follow it, a
line per reason, and the adapters the case did not select (its ``adapters:``/``exclude:``) one
count line (:func:`case_pairs`), so a case's verdicts are not buried under rows that say
nothing of it.

A gradient case's table has one more column, the worst gradient row (dx, dh0, dc0, d<block>),
beside the worst forward row; an adapter without a backward pass says so in its reason. Pairs
with step-local rows (``run --step-mode``, :mod:`harness.steplocal`) get a line under the
table: the worst one-step error and how many steps are beyond tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness import blind, compare
from harness.errors import printable_lines
from harness.results import RunResult


def _fmt(x: float) -> str:
    return f"{x:.2e}"


def split_rows(rows: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(forward rows: y, h_n, c_n; gradient rows: dx, dh0, dc0, d<block>) of a pair, its
    free-running rows only (step rows: :func:`step_text`)."""
    if rows is None:
        return None, None
    rows = compare.of_mode(rows, compare.FREE)
    forward = rows["output"].isin(compare.FORWARD)
    return rows[forward], rows[~forward]


def floor_ratio_text(rows: pd.DataFrame | None) -> str:
    """The largest finite error/noise-floor ratio of the rows, e.g. ``2.1x`` (empty: none)."""
    if rows is None or rows.empty:
        return ""
    fr = rows["floor_ratio"].replace([float("inf")], float("nan")).max()
    return "" if pd.isna(fr) else f"{fr:.2g}x"


def ulp_text(rows: pd.DataFrame | None) -> str:
    """A float64 pair's worst error in units in the last place, e.g. ``3 ulp``: its noise floor
    is zero (the reference is float64 itself), so a floor ratio says nothing there."""
    if rows is None or rows.empty:
        return ""
    u = rows["max_ulp"].replace([float("inf")], float("nan")).max()
    return "" if pd.isna(u) else f"{u:.3g} ulp"


DIRECTION_WORDS = {0: "forward", 1: "backward"}


def diverged_reason(first: pd.Series | None) -> str:
    """Why a pair DIVERGED, in words: its first diverging output, layer, direction and step,
    with the error there (a DIVERGED pair has no exception text of its own)."""
    if first is None:
        return ""

    def known(v) -> bool:
        return not pd.isna(v) and v >= 0

    parts = [f"{first['output']} diverges first at layer {int(first['layer'])}"]
    if known(first["direction"]):
        parts.append(f"{DIRECTION_WORDS.get(int(first['direction']), 'direction')} direction "
                     f"(d{int(first['direction'])})")
    if known(first["t"]):
        parts.append(f"step t={int(first['t'])}")
    return (", ".join(parts) + f": max_abs {_fmt(first['max_abs'])}, "
            f"{first['tol_ratio']:.3g}x tolerance")


def gradient_text(rows: pd.DataFrame | None) -> str:
    """The worst gradient row, e.g. ``3.10e-07 (dW_f L0 d1, 0.031x tol, 2.1x floor)``."""
    w = compare.worst(rows)
    if w is None:
        return ""
    floor = floor_ratio_text(rows)
    return (f"{_fmt(w['max_abs'])} ({compare.where(w)}, {w['tol_ratio']:.2g}x tol"
            + (f", {floor} floor" if floor else "") + ")")


def step_text(rows: pd.DataFrame | None) -> str:
    """The step-local rows of a pair in words, e.g. ``worst one-step error 1.2e-06 (y L0 d1
    t=4 (step), 0.12x tol, 3x floor); 0 of 120 steps beyond tolerance`` (empty: none)."""
    steps = compare.of_mode(rows, compare.STEP)
    w = compare.worst(steps)
    if w is None:
        return ""
    floor = floor_ratio_text(steps)
    bad = int(compare.diverged(steps["verdict"]).sum())
    return (f"worst one-step error {_fmt(w['max_abs'])} ({compare.where(w)}, "
            f"{w['tol_ratio']:.2g}x tol" + (f", {floor} floor" if floor else "")
            + f"); {bad} of {len(steps)} steps beyond tolerance")


def pair_row(p, gradients: bool = False, dtype: str | None = None) -> list[str]:
    """A pair's row under :func:`headers`: the worst forward row (y, h_n, c_n) and, for a
    gradient case, the worst gradient row in a column of its own. A float64 case's noise-floor
    column gives the error in ulp; a DIVERGED pair's reason says where it diverged first; a
    pair's judge may say its worst row in its own units (:meth:`harness.judges.Figures.worst_text`:
    a quantized pair's in output steps, with the cost of quantizing)."""
    forward, grads = split_rows(p.rows)
    worst, first = compare.worst(forward), p.first_diverging
    worst_text = first_text = ""
    if worst is not None:
        worst_text = p.figures.worst_text(worst, _fmt)
    if first is not None:
        first_text = compare.where(first)
    floor = ulp_text(forward) if dtype == "float64" else floor_ratio_text(forward)
    row = [p.adapter, p.status, worst_text, floor, first_text]
    if gradients:
        row.append(gradient_text(grads))
    return row + [f"{p.seconds:.3f}", pair_reason(p)]


def pair_reason(p) -> str:
    """Why a pair has its verdict, for summary.md and index.html: a DIVERGED pair's first
    diverging output, layer, direction and step, then the run's own reason (an exception, the
    step-local verdict, a note) and the cause a GPU rerun attributes it to."""
    where = diverged_reason(p.first_diverging) if p.status == compare.DIVERGED else ""
    return "; ".join(t for t in (where, p.reason, getattr(p, "attribution", "")) if t)


HEADERS = ["adapter", "verdict", "worst max_abs", "x noise floor (float64: ulp)",
           "first diverging", "seconds", "reason"]


def headers(gradients: bool = False) -> list[str]:
    """Column names of :func:`pair_row`; a gradient case has a "worst gradient" column."""
    return HEADERS[:5] + ["worst gradient"] + HEADERS[5:] if gradients else list(HEADERS)


@dataclass
class CasePairs:
    """A case's pairs as the reports lay them out: the ones with a table row; the not-applicable
    ones, grouped by reason (a line per reason); the adapters the case did not select (one
    count line)."""

    shown: list = field(default_factory=list)
    not_applicable: dict[str, list[str]] = field(default_factory=dict)  # reason -> adapters
    not_selected: list[str] = field(default_factory=list)

    @property
    def not_selected_line(self) -> str:
        """e.g. ``14 adapters not selected by the case (adapters/exclude): a, b, ...``."""
        n = len(self.not_selected)
        if not n:
            return ""
        return (f"{n} adapter{'s' if n > 1 else ''} {compare.NOT_SELECTED} "
                f"(adapters/exclude): {', '.join(self.not_selected)}")


def not_selected(p) -> bool:
    """A pair the case's ``adapters:``/``exclude:`` left out (harness.runner)."""
    return p.status == compare.NOT_APPLICABLE and (p.reason or "").startswith(compare.NOT_SELECTED)


def case_pairs(result: RunResult, case, pairs: list) -> CasePairs:
    """Lay out ``pairs`` (the case's) as :class:`CasePairs`. A named-only adapter of the run
    with no pair in the case (it runs only where named) counts as not selected, except in a
    shard, whose other pairs are elsewhere."""
    out = CasePairs()
    for p in pairs:
        if not_selected(p):
            out.not_selected.append(p.adapter)
        elif p.status == compare.NOT_APPLICABLE:
            # "litert-int8: not a quantized case": the adapter is in the list already
            reason = (p.reason or "").removeprefix(f"{p.adapter}: ") or "(no reason given)"
            out.not_applicable.setdefault(reason, []).append(p.adapter)
        else:
            out.shown.append(p)
    if not getattr(result, "shard", None):
        have = {p.adapter for p in pairs}
        out.not_selected += [a.name for a in result.adapters
                             if getattr(a, "named_only", None) is not None and a.name not in have]
    return out


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A GitHub table without padding: a column is not widened to its longest reason on every
    row (the bundled suite's summary.md was mostly spaces)."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ")
                                 for c in cells) + " |"

    return "\n".join([line(head), "|" + "|".join("---" for _ in head) + "|"]
                     + [line(r) for r in rows])


NO_FRAMEWORK = ("no framework was compared: only the harness's own references (reference, "
                "noise-floor), whose pairs pass by construction")


def summary_markdown(result: RunResult) -> str:
    counts = pd.Series([p.status for p in result.pairs]).value_counts().to_dict()
    lines = ["# Conformance summary", ""]
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + f" — {result.seconds:.1f} s")
    if result.compared_no_framework:
        lines += ["", f"**Vacuous**: {NO_FRAMEWORK}."]
    if result.case_errors:
        lines += ["", "## Case errors", ""]
        lines += [f"- `{name}`: {err}" for name, err in result.case_errors.items()]
    by_case: dict[str, list] = {}
    for p in result.pairs:
        by_case.setdefault(p.case, []).append(p)
    for case in result.cases:
        pairs = by_case.get(case.name, [])
        lines += ["", f"## {case.name}", ""]
        lines.append(_case_line(case))
        laid = case_pairs(result, case, pairs)
        if laid.shown:
            lines += ["", markdown_table(headers(case.gradients),
                                         [pair_row(p, case.gradients, case.dtype)
                                          for p in laid.shown])]
        if laid.not_applicable:
            lines += ["", f"`{compare.NOT_APPLICABLE}`:", ""]
            lines += [f"- {', '.join(f'`{a}`' for a in adapters)}: {reason}"
                      for reason, adapters in laid.not_applicable.items()]
        if laid.not_selected:
            lines += ["", laid.not_selected_line + "."]
        steps = [(p.adapter, step_text(p.rows)) for p in pairs]
        if any(text for _, text in steps):
            lines += ["", "Step-local (each step from the reference's state, `--step-mode`):", ""]
            lines += [f"- `{a}`: {text}" for a, text in steps if text]
        check = blind.of_result(result, case)
        if check is not None:
            lines += ["", ("**Warning**: " if check.warning else "") + check.note]
            lines += [line for n in check.notes for line in ("", f"Note: {n}.")]
    lines.append("")
    lines.append(f"Verdicts: `{compare.PASS}` within tolerance at every row; `{compare.DIVERGED}` "
                 "beyond it somewhere; first diverging = earliest output step beyond tolerance. "
                 "Worst max_abs: the forward outputs (y, h_n, c_n); worst gradient (cases with "
                 "`gradients: true`): dx, dh0, dc0 and the parameter gradients d<block>. "
                 "Step-local: the one-step error of each layer run one step at a time from "
                 "the reference's own states (docs/equations.md, Step-local divergence); it "
                 "explains a verdict (cell or state carrying), never changes it.")
    # reasons and upstream ids may come from a merged shard's run.json: no escape sequences
    return printable_lines("\n".join(lines)) + "\n"


def _case_line(case) -> str:
    bits = [f"{case.cell.upper()} I={case.input_size} H={case.hidden_size}"]
    if case.proj_size:
        bits.append(f"P={case.proj_size}")
    bits.append(f"layers={case.num_layers} {case.dir_mode} B={case.batch} T={case.seq_len} "
                f"{case.dtype}")
    for flag in ("peepholes", "input_forget"):
        if getattr(case, flag):
            bits.append(flag)
    for k in ("cell_clip", "proj_clip", "gate_clip"):
        if getattr(case, k) is not None:
            bits.append(f"{k}={getattr(case, k)}")
    if case.forget_bias:
        bits.append(f"forget_bias={case.forget_bias}")
    if case.seq_lengths:
        bits.append(f"lengths={case.seq_lengths}")
    if case.cell_kind.reads("reset_after"):
        bits.append("reset_after" if case.reset_after else "reset_before")
    if case.initial_state == "random":
        bits.append("random initial state")
    elif case.initial_state == "none":
        bits.append("initial state omitted")
    if case.gradients:
        bits.append("gradients")
    return " ".join(bits)
