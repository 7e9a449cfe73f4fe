"""summary.md: a table per case: adapter, verdict, worst error, first diverging step, reason.

A gradient case's table has one more column, the worst gradient row (dx, dh0, dc0, d<block>),
beside the worst forward row; an adapter without a backward pass says so in its reason.
"""

from __future__ import annotations

import pandas as pd
from tabulate import tabulate

from harness import compare
from harness.blind import blind_note
from harness.runner import RunResult


def _fmt(x: float) -> str:
    return f"{x:.2e}"


def split_rows(rows: pd.DataFrame | None) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(forward rows: y, h_n, c_n; gradient rows: dx, dh0, dc0, d<block>) of a pair."""
    if rows is None:
        return None, None
    forward = rows["output"].isin(compare.FORWARD)
    return rows[forward], rows[~forward]


def floor_ratio_text(rows: pd.DataFrame | None) -> str:
    """The largest finite error/noise-floor ratio of the rows, e.g. ``2.1x`` (empty: none)."""
    if rows is None or rows.empty:
        return ""
    fr = rows["floor_ratio"].replace([float("inf")], float("nan")).max()
    return "" if pd.isna(fr) else f"{fr:.2g}x"


def gradient_text(rows: pd.DataFrame | None) -> str:
    """The worst gradient row, e.g. ``3.10e-07 (dW_f L0 d1, 0.031x tol, 2.1x floor)``."""
    w = compare.worst(rows)
    if w is None:
        return ""
    floor = floor_ratio_text(rows)
    return (f"{_fmt(w['max_abs'])} ({compare.where(w)}, {w['tol_ratio']:.2g}x tol"
            + (f", {floor} floor" if floor else "") + ")")


def pair_row(p, gradients: bool = False) -> list[str]:
    """A pair's row under :func:`headers`: the worst forward row (y, h_n, c_n) and, for a
    gradient case, the worst gradient row in a column of its own."""
    forward, grads = split_rows(p.rows)
    worst, first = compare.worst(forward), p.first_diverging
    worst_text = first_text = ""
    if worst is not None:
        worst_text = f"{_fmt(worst['max_abs'])} ({worst['output']}, {worst['tol_ratio']:.2g}x tol)"
    if first is not None:
        first_text = compare.where(first)
    row = [p.adapter, p.status, worst_text, floor_ratio_text(forward), first_text]
    if gradients:
        row.append(gradient_text(grads))
    reason = "; ".join(t for t in (p.reason, getattr(p, "attribution", "")) if t)
    return row + [f"{p.seconds:.3f}", reason]


HEADERS = ["adapter", "verdict", "worst max_abs", "x noise floor", "first diverging", "seconds",
           "reason"]


def headers(gradients: bool = False) -> list[str]:
    """Column names of :func:`pair_row`; a gradient case has a "worst gradient" column."""
    return HEADERS[:5] + ["worst gradient"] + HEADERS[5:] if gradients else list(HEADERS)


def summary_markdown(result: RunResult) -> str:
    counts = pd.Series([p.status for p in result.pairs]).value_counts().to_dict()
    lines = ["# Conformance summary", ""]
    lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + f" — {result.seconds:.1f} s")
    if result.case_errors:
        lines += ["", "## Cases that could not be prepared", ""]
        lines += [f"- `{name}`: {err}" for name, err in result.case_errors.items()]
    by_case: dict[str, list] = {}
    for p in result.pairs:
        by_case.setdefault(p.case, []).append(p)
    for case in result.cases:
        pairs = by_case.get(case.name, [])
        lines += ["", f"## {case.name}", ""]
        lines.append(_case_line(case))
        lines.append("")
        lines.append(tabulate([pair_row(p, case.gradients) for p in pairs],
                              headers=headers(case.gradients), tablefmt="github"))
        if case.name not in result.case_errors:
            lines += ["", blind_note(case)]
    lines.append("")
    lines.append(f"Verdicts: `{compare.PASS}` within tolerance at every row; `{compare.DIVERGED}` "
                 "beyond it somewhere; first diverging = earliest output step beyond tolerance. "
                 "Worst max_abs: the forward outputs (y, h_n, c_n); worst gradient (cases with "
                 "`gradients: true`): dx, dh0, dc0 and the parameter gradients d<block>.")
    return "\n".join(lines) + "\n"


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
    if case.cell == "gru":
        bits.append("reset_after" if case.reset_after else "reset_before")
    if case.initial_state != "zeros":
        bits.append("random initial state")
    if case.gradients:
        bits.append("gradients")
    return " ".join(bits)
