"""``rnn-harness diff OLD NEW``: what changed between two report folders.

Reads each folder's ``divergence.csv`` and ``run.json`` (the report folder contract) and renders
markdown. Verdicts are the ones the runs wrote (pair status in run.json, row verdict in the csv);
nothing is recomputed.

A **regression** (exit 1):

- a pair whose status is now ``DIVERGED`` or ``error`` and was something else (or absent);
- in a pair ``DIVERGED`` in both runs, a row (output, layer, direction, t) beyond tolerance now
  that was within it (or absent) before;
- a row whose ``max_abs`` grew by more than ``factor``, unless both runs' errors on that row are
  within ``ignore_below`` x their tolerance (``tol_ratio``; default 1: only errors that are, or
  become, beyond tolerance count, so noise-level jitter such as 1e-16 -> 1e-15 never does).

Also exit 1, though not a regression: a pair now ``looks fixed`` (an ``expected:`` DIVERGED that
passes: the upstream bug looks fixed, and the expectation is to be removed from the case, as the
run itself says by failing).

Reported without failing: fixed pairs (DIVERGED, error or ``looks fixed`` before, passing now),
other status changes (e.g. an adapter that became unavailable, or a DIVERGED pair now a ``known
upstream bug`` because the case expects it), cases added or removed, **cases changed** (the spec
run.json recorded differs: a tolerance, a seed, a size; a pair whose verdict or error changed in
such a case says so, since the change may come from the case and not the code), and changed
versions, precision flags and platform.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tabulate import tabulate

from harness import compare
from harness.errors import HarnessError, printable_lines
from harness.report.read_back import read_report
from harness.report.record import PairRecord, RunRecord

KEY = ["case", "adapter", "mode", "output", "layer", "direction", "t"]
BAD = (compare.DIVERGED, compare.ERROR)


@dataclass
class Report:
    """What a diff reads of a report folder (:func:`harness.report.read_back.read_report`): the
    run record and divergence.csv's rows, keyed for joining."""

    folder: Path
    rows: pd.DataFrame
    run: RunRecord

    @property
    def status(self) -> dict[tuple[str, str], PairRecord]:
        return {(p.case, p.adapter): p for p in self.run.pairs}


def load_report(folder: str | Path) -> Report:
    report = read_report(folder)
    rows = report.rows
    missing = [c for c in [*KEY, "max_abs", "tol_ratio", "verdict"] if c not in rows.columns]
    if missing:
        raise HarnessError(f"columns missing: {', '.join(missing)}",
                           file=report.folder / "divergence.csv")
    # Final-state rows have no t; -1 makes the key joinable.
    rows["t"] = rows["t"].fillna(-1).astype(int)
    rows["direction"] = rows["direction"].fillna(-1).astype(int)  # dx rows have none
    return Report(report.folder, rows, report.run)


@dataclass
class Diff:
    old: Report
    new: Report
    factor: float
    ignore_below: float
    new_bad: list[dict] = field(default_factory=list)  # pairs now DIVERGED / error
    fixed: list[dict] = field(default_factory=list)  # pairs DIVERGED / error before, not now
    changed: list[dict] = field(default_factory=list)  # other status changes
    new_rows: pd.DataFrame | None = None  # newly beyond tolerance, pairs DIVERGED in both runs
    grown: pd.DataFrame | None = None  # rows whose max_abs grew more than the factor
    looks_fixed: list[dict] = field(default_factory=list)  # pairs now LOOKS_FIXED: act on them
    cases_added: list[str] = field(default_factory=list)
    cases_removed: list[str] = field(default_factory=list)
    case_changes: list[list[str]] = field(default_factory=list)  # [case, what, old, new]
    environment: list[list[str]] = field(default_factory=list)  # [what, old, new]

    @property
    def regression(self) -> bool:
        return bool(self.new_bad) or _nonempty(self.new_rows) or _nonempty(self.grown)

    @property
    def fails(self) -> bool:
        """Exit 1: a regression, or a known upstream bug that now looks fixed."""
        return self.regression or bool(self.looks_fixed)

    def case_changed(self, case: str, adapter: str | None = None) -> str:
        """What changed in a case's spec that bears on a pair, e.g. ``tolerance, seed`` (""
        when nothing did). A per-adapter tolerance of another adapter does not count."""
        whats = []
        for c, what, _, _ in self.case_changes:
            if c != case:
                continue
            parts = what.split(".")
            if adapter is not None and parts[:2] == ["tolerance", "adapters"] \
                    and len(parts) > 2 and parts[2] != adapter:
                continue
            if parts[0] not in whats:
                whats.append(parts[0])
        return ", ".join(whats)


def _nonempty(df: pd.DataFrame | None) -> bool:
    return df is not None and not df.empty


def _worst_text(rows: pd.DataFrame, case: str, adapter: str) -> str:
    """The first diverging row of a pair, as the run wrote it, e.g. ``y L1 d0 t=3: 2.1e-04``."""
    sel = rows[(rows["case"] == case) & (rows["adapter"] == adapter)]
    if sel.empty:
        return ""
    f = compare.first_divergence(sel)
    r = f if f is not None else compare.worst(sel)
    return (f"{compare.where(r)}: {r['max_abs']:.2e} "
            f"({r['tol_ratio']:.3g}x tol)")


def _flatten(prefix: str, d: dict) -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(key + ".", v))
        else:
            out[key] = json.dumps(v) if not isinstance(v, str) else v
    return out


def _environment(old: RunRecord, new: RunRecord) -> list[list[str]]:
    """Changed versions, precision flags, platform and adapter availability, as [what, old, new]."""
    rows = []
    old_doc, new_doc = (r.model_dump(mode="json", exclude_unset=True) for r in (old, new))
    for section in ("versions", "precision_flags", "adapters"):
        a, b = _flatten("", old_doc.get(section, {})), _flatten("", new_doc.get(section, {}))
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                rows.append([f"{section}: {k}", a.get(k, "(absent)"), b.get(k, "(absent)")])
    for k in ("platform", "machine"):
        if old_doc.get(k) != new_doc.get(k):
            rows.append([k, str(old_doc.get(k, "(absent)")), str(new_doc.get(k, "(absent)"))])
    return rows


def _case_changes(old: RunRecord, new: RunRecord) -> list[list[str]]:
    """The spec fields that differ, for each case in both runs, as [case, what, old, new];
    ``what`` is a dotted path into the case (``tolerance.adapters.torch-cpu.atol``). The case
    file's path is not compared: the same case runs from different checkouts."""
    rows = []
    for name in sorted(set(old.cases) & set(new.cases)):
        a, b = old.cases[name], new.cases[name]
        if a.spec is not None and b.spec is not None:
            fa, fb = _flatten("", a.spec), _flatten("", b.spec)
        else:  # a run.json from before specs were recorded: what it has
            fa = {k: json.dumps(v) for k, v in (("seed", a.seed), ("dtype", a.dtype))}
            fb = {k: json.dumps(v) for k, v in (("seed", b.seed), ("dtype", b.dtype))}
        for k in sorted(set(fa) | set(fb)):
            if fa.get(k) != fb.get(k):
                rows.append([name, k, *(_spec_value(f.get(k)) for f in (fa, fb))])
    return rows


def _spec_value(v: str | None) -> str:
    return "(absent)" if v is None else "(unset)" if v == "null" else v


def diff_reports(old: Report, new: Report, factor: float = 10.0, ignore_below: float = 1.0) -> Diff:
    """Compare two loaded report folders (see the module docstring for what counts)."""
    if factor <= 1:
        raise HarnessError(f"--factor must be > 1, got {factor}")
    d = Diff(old, new, factor, ignore_below)
    so, sn = old.status, new.status
    for key in sorted(set(so) | set(sn)):
        a = so[key].status if key in so else None
        b = sn[key].status if key in sn else None
        if a == b:
            continue
        entry = {"case": key[0], "adapter": key[1], "old": a or "(absent)", "new": b or "(absent)",
                 "reason": (sn[key].reason or "") if b else ""}
        if b in BAD:
            diverged = b == compare.DIVERGED
            entry["where"] = _worst_text(new.rows, *key) if diverged else entry["reason"]
            d.new_bad.append(entry)
        elif b == compare.LOOKS_FIXED:
            d.looks_fixed.append(entry)
        elif b == compare.PASS and a in (*BAD, compare.LOOKS_FIXED, compare.KNOWN_BUG):
            d.fixed.append(entry)
        elif a is not None and b is not None:  # e.g. DIVERGED -> known upstream bug: expected now
            d.changed.append(entry)
    cases_old = set(old.run.cases) or set(k[0] for k in so)
    cases_new = set(new.run.cases) or set(k[0] for k in sn)
    d.cases_added, d.cases_removed = sorted(cases_new - cases_old), sorted(cases_old - cases_new)
    d.case_changes = _case_changes(old.run, new.run)
    for entry in (*d.new_bad, *d.looks_fixed, *d.fixed, *d.changed):
        entry["case_changed"] = d.case_changed(entry["case"], entry["adapter"])

    cols = [*KEY, "max_abs", "tol_ratio", "verdict"]
    both = old.rows[cols].merge(new.rows[cols], on=KEY, how="right", suffixes=("_old", "_new"))
    # Rows newly beyond tolerance in pairs that were already DIVERGED (a newly DIVERGED pair is
    # listed as a pair above).
    still = {k for k in set(so) & set(sn) if so[k].status == sn[k].status == compare.DIVERGED}
    pairs = zip(both["case"], both["adapter"], strict=True)
    in_still = pd.Series([pair in still for pair in pairs], index=both.index, dtype=bool)
    d.new_rows = both[in_still & compare.diverged(both["verdict_new"])
                      & ~compare.diverged(both["verdict_old"])]
    with np.errstate(divide="ignore", invalid="ignore"):
        growth = np.where(both["max_abs_old"] > 0, both["max_abs_new"] / both["max_abs_old"],
                          np.where(both["max_abs_new"] > 0, np.inf, 1.0))
    both = both.assign(growth=growth)
    relevant = ~((both["tol_ratio_old"] <= ignore_below) & (both["tol_ratio_new"] <= ignore_below))
    d.grown = both[both["max_abs_old"].notna() & relevant & (both["growth"] > factor)]
    d.environment = _environment(old.run, new.run)
    return d


CASE_CHANGED = "case changed"  # the column of a pair whose case's spec changed


def _pairs_table(entries: list[dict], extra: str | None = None) -> str:
    headers = ["case", "adapter", "was", "now"] + ([extra] if extra else [])
    rows = [[e["case"], e["adapter"], e["old"], e["new"]] + ([e.get("where") or e.get("reason", "")]
                                                             if extra else []) for e in entries]
    if any(e.get("case_changed") for e in entries):
        headers.append(CASE_CHANGED)
        for row, e in zip(rows, entries, strict=True):
            row.append(e.get("case_changed", ""))
    return tabulate(rows, headers=headers, tablefmt="github")


def _rows_by_pair(d: Diff, rows: pd.DataFrame, value: str) -> str:
    """One line per pair: how many rows, and the worst one."""
    out = []
    for (case, adapter), part in rows.groupby(["case", "adapter"], sort=True):
        w = part.loc[part[value].idxmax()]
        out.append([case, adapter, len(part), compare.where(w),
                    f"{w['max_abs_old']:.2e}" if not pd.isna(w["max_abs_old"]) else "(absent)",
                    f"{w['max_abs_new']:.2e}",
                    "" if pd.isna(w["growth"]) else f"{w['growth']:.3g}x",
                    f"{w['tol_ratio_new']:.3g}x"])
    headers = ["case", "adapter", "rows", "worst row", "old max_abs", "new max_abs", "growth",
               "now x tol"]
    notes = [d.case_changed(row[0], row[1]) for row in out]
    if any(notes):
        headers.append(CASE_CHANGED)
        for row, note in zip(out, notes, strict=True):
            row.append(note)
    return tabulate(out, headers=headers, tablefmt="github")


def diff_dict(d: Diff) -> dict:
    """The diff as plain data (``diff --format json``): what ``diff_markdown`` prints."""

    def rows(df: pd.DataFrame | None) -> list[dict]:
        return [] if df is None else df.to_dict(orient="records")

    return {"regression": d.regression, "factor": d.factor, "ignore_below": d.ignore_below,
            "looks_fixed": d.looks_fixed, "new_bad": d.new_bad, "fixed": d.fixed,
            "changed": d.changed, "new_rows": rows(d.new_rows), "grown": rows(d.grown),
            "cases_added": d.cases_added, "cases_removed": d.cases_removed,
            "case_changes": [dict(zip(("case", "what", "old", "new"), e, strict=True))
                             for e in d.case_changes],
            "environment": [dict(zip(("what", "old", "new"), e, strict=True))
                            for e in d.environment]}


def diff_markdown(d: Diff) -> str:
    o, n = d.old.run, d.new.run
    lines = ["# Report diff", "",
             f"- old: `{d.old.folder}` ({o.created}, {len(d.old.status)} pairs)",
             f"- new: `{d.new.folder}` ({n.created}, {len(d.new.status)} pairs)", ""]
    if d.regression:
        n_rows = 0 if d.new_rows is None else len(d.new_rows)
        n_grown = 0 if d.grown is None else len(d.grown)
        lines.append(f"**Regression**: {len(d.new_bad)} pair(s) newly DIVERGED or failing, "
                     f"{n_rows} row(s) newly beyond tolerance in pairs already DIVERGED, "
                     f"{n_grown} row(s) whose error grew more than {d.factor:g}x.")
    else:
        lines.append("No regression.")
    if d.looks_fixed:
        lines.append(f"\n**To act on**: {len(d.looks_fixed)} pair(s) whose known upstream bug "
                     "now looks fixed: remove the `expected:` entry from the case "
                     "(see Looks fixed).")
    changed_cases = sorted({c for c, *_ in d.case_changes})
    if changed_cases:
        tol = sorted({c for c, what, *_ in d.case_changes if what.startswith("tolerance")})
        lines.append(f"\n**{len(changed_cases)} case(s) changed** between the runs"
                     + (f" ({len(tol)} of them their tolerance)" if tol else "")
                     + ": a verdict or an error ratio that changed in them may come from the "
                       "case, not the code (see Case changes).")

    def section(title: str, body: str) -> None:
        lines.extend(["", f"## {title}", "", body])

    if d.new_bad:
        section("New divergences and errors", _pairs_table(d.new_bad, "first diverging / reason"))
    if d.looks_fixed:
        section("Looks fixed (remove the expectation)", _pairs_table(d.looks_fixed, "reason"))
    if _nonempty(d.new_rows):
        section("Rows newly beyond tolerance in pairs already DIVERGED",
                _rows_by_pair(d, d.new_rows.assign(growth=np.nan), "tol_ratio_new"))
    if _nonempty(d.grown):
        section(f"Errors grown more than {d.factor:g}x",
                _rows_by_pair(d, d.grown, "growth")
                + f"\n\nRows where both runs are within {d.ignore_below:g}x tolerance are ignored.")
    if d.fixed:
        section("Fixed", _pairs_table(d.fixed))
    if d.changed:
        section("Other status changes", _pairs_table(d.changed, "reason"))
    if d.cases_added or d.cases_removed:
        section("Cases", "\n".join([f"- added: `{c}`" for c in d.cases_added]
                                   + [f"- removed: `{c}`" for c in d.cases_removed]))
    if d.case_changes:
        section("Case changes (the spec each run recorded)",
                tabulate(d.case_changes, headers=["case", "what", "old", "new"],
                         tablefmt="github", disable_numparse=True))
    if d.environment:
        section("Environment changes (adapters, versions, flags)",
                tabulate(d.environment, headers=["what", "old", "new"], tablefmt="github"))
    # reasons, versions and platform come from the reports' run.json: no escape sequence of
    # theirs reaches the terminal or diff.md
    return printable_lines("\n".join(lines)) + "\n"
