"""``rnn-harness merge OUT SHARD...``: one report folder from the folders of ``run --shard K/N``.

The merged folder is the report the unsharded run would have written (the report folder
``run`` writes): ``divergence.csv`` rows (copied as text, not re-formatted) and run.json ``pairs``
in the unsharded order (cases as discovered, adapters as selected, which every shard records in
run.json ``shard_of``); ``summary.md``, ``layouts.md`` and ``index.html`` rendered again by the
same writers from a RunResult rebuilt from the shards' CSV rows and run records (cases from their
recorded ``spec``, adapters from the registry); ``errors.log`` and ``outputs/`` combined (only
the regular files inside each shard: :func:`harness.report.folder.copy_outputs`).
What differs from an unsharded run: timings (summed over shards), run.json ``shards`` /
``shard_runs`` (each shard's folder, time, platform and versions) instead of ``shard``, and a
line in summary.md naming the shards, with a warning when they ran with different framework
versions, precision flags or adapter availability.

The shards are read by :mod:`harness.report.read_back` (the run record validated there: a shard
count beyond the bound, a newer schema, a malformed field), the merged folder written whole by
:mod:`harness.report.swap`.
Refused here (HarnessError, exit 2): a folder that is not a shard, shards of different runs
(other cases or adapters), a pair in two folders, a shard given twice, an incomplete set of
shards, a pair whose case has no recorded spec (or another case's), a pair whose status in
run.json is not the one its divergence.csv rows and recorded spec give (the run's own
judges, :func:`harness.judges.rejudge`: verdicts are derived, never taken on trust; a pair's
recorded figures must agree with its rows, its recorded known-bug decision with the case's
``expected:`` and the registry), and an OUT_DIR that would replace a shard;
``allow_partial`` accepts all but the overlaps, and the report says what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from harness import blind, judges
from harness.adapters import ADAPTERS, Adapter
from harness.errors import HarnessError, printable_lines
from harness.judges import Disagrees, Verdict
from harness.npz import write_text
from harness.report import folder as report_folder
from harness.report import swap
from harness.report.ownership import owned_entries
from harness.report.read_back import ReportFolder, read_report
from harness.report.record import CaseRecord, RunRecord
from harness.report.run_json import FromShards, run_record
from harness.results import PairResult, RunResult
from harness.shard import pair_id
from harness.spec import Case

if TYPE_CHECKING:
    import pandas as pd

ENVIRONMENT = ("versions", "precision_flags")  # per shard; a difference is warned about


@dataclass
class Merged:
    out: Path
    result: RunResult
    shards: list[str]
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class _Unknown(Adapter):
    """An adapter a shard ran that this installation does not know: no layout tables."""

    def __init__(self, name: str) -> None:
        self.name = name


def _pairs(r: ReportFolder) -> list[str]:
    return [pair_id(p.case, p.adapter) for p in r.run.pairs]


def _label(r: ReportFolder) -> str:
    return r.run.shard or str(r.folder)


def _check(reports: list[ReportFolder], allow_partial: bool) -> tuple[list[str], list[str]]:
    """The shard ids present and missing; HarnessError for what cannot be merged."""
    owner: dict[str, Path] = {}
    for r in reports:
        for pid in _pairs(r):
            if pid in owner:
                raise HarnessError(f"pair {pid} is in two report folders ({owner[pid]} and "
                                   f"{r.folder}): the shards overlap")
            owner[pid] = r.folder
    not_shards = [r for r in reports if not r.run.shard]
    if not_shards and not allow_partial:
        raise HarnessError("not a shard (its run.json has no shard: it was not run with "
                           "`run --shard K/N`; use --allow-partial to merge it anyway)",
                           file=not_shards[0].folder)
    given: dict[str, Path] = {}
    counts = set()
    for r in reports:
        shard = r.run.shard
        if not shard:
            continue
        if shard in given:
            raise HarnessError(f"shard {shard} is given twice ({given[shard]} and "
                               f"{r.folder})")
        given[shard] = r.folder
        counts.add(r.run.shard_count)
    if len(counts) > 1 and not allow_partial:
        raise HarnessError("shards of different splits: " + ", ".join(sorted(given))
                           + " (every folder must come from the same `run --shard K/N` with "
                             "one N)")
    wholes = {json.dumps(r.run.shard_of.model_dump() if r.run.shard_of else None, sort_keys=True)
              for r in reports if r.run.shard}
    if len(wholes) > 1 and not allow_partial:
        raise HarnessError("the shards come from different runs: their cases or adapters differ "
                           "(run.json shard_of); use --allow-partial to merge them anyway")
    missing = [f"{k}/{n}" for n in sorted(counts) for k in range(1, n + 1)
               if f"{k}/{n}" not in given]
    if missing and not allow_partial:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more"
                                           if len(missing) > 10 else "")
        raise HarnessError(f"missing shard(s) {shown}: give every shard's folder "
                           "(or --allow-partial to merge those there are)")
    present = sorted(given, key=lambda s: tuple(int(x) for x in s.split("/"))[::-1])
    return present, missing


def _order(reports: list[ReportFolder], key: str) -> list[str]:
    """The whole run's order of cases or adapters (shard_of), then any others as first seen."""
    names: dict[str, None] = {}
    for r in reports:
        for n in getattr(r.run.shard_of, key, None) or []:
            names.setdefault(n)
    for r in reports:
        for p in r.run.pairs:
            names.setdefault(p.case if key == "cases" else p.adapter)
    return list(names)


def _case(name: str, entry: CaseRecord | None, folder: Path) -> Case:
    """The case as the shard ran it: its recorded spec (never a file named in run.json: a
    report folder from elsewhere must not make merge read other files)."""
    if entry is None or entry.spec is None:
        raise HarnessError(f"case {name[:80]!r} has a pair but no recorded spec (run.json cases."
                           f"{name[:80]}.spec): merge renders cases from it", file=folder /
                           "run.json", field="pairs")
    try:
        case = Case.model_validate({**entry.spec, "source": entry.file})
    except ValidationError as exc:
        raise HarnessError(f"case {name[:80]!r}: recorded spec does not validate "
                           f"({exc.error_count()} error(s))", file=folder / "run.json") from None
    if case.name != name:
        raise HarnessError(f"case {name[:80]!r}: its recorded spec is of another case, "
                           f"{case.name[:80]!r}", file=folder / "run.json",
                           field=f"cases.{name[:80]}.spec.name")
    return case


def _judged(reports: list[ReportFolder], cases: dict[str, Case],
            rows_of: dict[tuple[str, str], pd.DataFrame]) -> dict[tuple[str, str], Verdict]:
    """Each pair judged again by its judge (:func:`harness.judges.rejudge`) from its recorded
    rows, figures and known-bug decision, which must agree with its rows, the case's recorded
    spec and the registry; its status in the shard's run.json must be the one that gives.
    Anything else is a shard edited or corrupted since it ran: an error naming the shard, never
    a verdict taken on trust. The verdicts, by (case, adapter)."""
    verdicts: dict[tuple[str, str], Verdict] = {}
    for r in reports:
        for p in r.run.pairs:
            pid = pair_id(p.case, p.adapter)[:160]
            case = cases[p.case]
            try:
                v = judges.rejudge(case, p.adapter, ADAPTERS.get(p.adapter), p.status,
                                   rows_of.get((p.case, p.adapter)),
                                   p.model_dump(mode="json", exclude_unset=True))
            except Disagrees as exc:
                raise HarnessError(f"pair {pid} {exc}", file=r.folder / "run.json",
                                   field="pairs") from None
            if v is None:
                continue
            if v.status != p.status:
                evidence = judges.judge_for(case, ADAPTERS.get(p.adapter)).evidence
                raise HarnessError(f"pair {pid} is {p.status!r} in run.json, but its "
                                   f"divergence.csv rows and {evidence} give {v.status!r}: "
                                   "the shard was changed after it ran",
                                   file=r.folder / "run.json", field="pairs")
            verdicts[(p.case, p.adapter)] = v
    return verdicts


def _differences(reports: list[ReportFolder]) -> tuple[dict[str, dict], list[str]]:
    """Per ENVIRONMENT section the merged dict (a key the shards disagree on holds every value
    with its shards) and warnings."""
    merged: dict[str, dict] = {}
    warnings = []
    for section in ENVIRONMENT:
        values: dict[str, dict[str, list[str]]] = {}
        for r in reports:
            for k, v in getattr(r.run, section).items():
                values.setdefault(k, {}).setdefault(json.dumps(v), []).append(_label(r))
        merged[section] = {}
        for k, by_value in values.items():
            if len(by_value) == 1:
                merged[section][k] = json.loads(next(iter(by_value)))
                continue
            text = "; ".join(f"{json.loads(v)} ({', '.join(s)})" for v, s in by_value.items())
            merged[section][k] = text
            warnings.append(f"the shards ran with different {section.replace('_', ' ')}: "
                            f"{k} = {text}")
    return merged, warnings


def _blind_checks(reports: list[ReportFolder], names: list[str],
                  adapters: list[str]) -> dict[str, blind.BlindCheck]:
    """Each case's blind-spot check as the shards recorded it, combined across the shards
    (:func:`harness.blind.combined`); a shard of run.json schema < 2 recorded only the warning
    text, which is carried over as it is. Nothing is checked again here."""
    found: dict[str, list[blind.BlindCheck]] = {}
    for r in reports:
        for name, doc in r.run.blind_checks.items():
            found.setdefault(name, []).append(blind.from_record(name, doc))
        if r.run.schema_version < 2:
            for name, text in r.run.blind_spots.items():
                found.setdefault(name, []).append(blind.BlindCheck(name, recorded_warning=text))
    return {n: blind.combined(found[n], adapters) for n in names if n in found}


def _adapters(reports: list[ReportFolder]) -> tuple[dict[str, dict], list[str]]:
    merged: dict[str, dict] = {}
    warnings = []
    for name in _order(reports, "adapters"):
        entries = [(_label(r), r.run.adapters.get(name)) for r in reports]
        entries = [(s, e) for s, e in entries if e is not None]
        if not entries:
            continue
        available = [s for s, e in entries if e.available]
        # the entry of a shard that ran the adapter: only there was its environment taken
        chosen = next((e for _, e in entries if e.environment),
                      next((e for _, e in entries if e.available), entries[0][1]))
        merged[name] = chosen.model_dump(mode="json", exclude_unset=True)
        if available and len(available) < len(entries):
            missing = [f"{s} ({e.reason})" for s, e in entries if not e.available]
            warnings.append(f"adapter {name} was available in {', '.join(available)} but not "
                            f"in {', '.join(missing)}")
    return merged, warnings


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _check_out(out: Path, reports: list[ReportFolder], option: str = "OUT_DIR") -> None:
    """The merged report must not replace a shard: OUT_DIR is not a shard's folder, and no
    shard lies in an entry of OUT_DIR that the new report replaces (a shard beside the report's
    files, ``merge pub pub/sh1 pub/sh2`` into an earlier report, is carried over)."""
    owned = owned_entries(out, option) if out.is_dir() else set()
    for r in reports:
        if _inside(out, r.folder):
            raise HarnessError("the merged report would overwrite a shard's folder; give "
                               f"another {option}", file=out)
        if any(_inside(r.folder, out / name) for name in owned):
            raise HarnessError(f"the merged report would replace the shard folder {r.folder} "
                               "(it is one of the report's own entries there); give another "
                               f"{option}", file=out)


def merge_reports(out: str | Path, folders: list[str | Path], *, allow_partial: bool = False,
                  plots: str = "failed", option: str = "OUT_DIR") -> Merged:
    """Merge shard report folders into ``out`` (see the module docstring); ``plots``: which
    pairs index.html draws plots for, as in :func:`harness.report.write_report`; ``option``:
    how the command line named ``out`` (:func:`harness.report.folder.merge_folders`)."""
    if not folders:
        raise HarnessError("no report folders to merge")
    out = swap.check_writable(out, option)
    reports = [read_report(f) for f in folders]
    _check_out(out, reports, option)
    present, missing = _check(reports, allow_partial)
    reports.sort(key=lambda r: (0, r.run.shard_index) if r.run.shard else (1, 0))
    order = _Order.of(reports)
    cases = _cases(reports)  # before anything is rendered from them
    report_folder.check_names(out, report_folder.report_names(
        [(p.case, p.adapter) for r in reports for p in r.run.pairs], outputs=True), option)
    text = _divergence_text(reports, order)
    rows_of = _rows_of(reports)
    pairs = _pair_results(reports, order, rows_of, _judged(reports, cases, rows_of))
    cases_doc, case_errors = _case_entries(reports, cases)
    result = _result(reports, order, cases, pairs, cases_doc, case_errors)
    environment, warnings = _differences(reports)
    adapters_doc, more = _adapters(reports)
    warnings += more
    if missing:
        warnings.insert(0, f"partial merge: shard(s) {', '.join(missing)} missing, their pairs "
                           "are not in this report")
    first = reports[0].run
    names = [case.name for case in result.cases]
    left_out: dict[str, str] = {}
    for r in reports:
        left_out.update(r.run.left_out)
    record = run_record(result, FromShards(
        first.platform, first.machine, environment["versions"], environment["precision_flags"],
        adapters_doc, {n: {k: v for k, v in cases_doc[n].items() if k != "prepare_seconds"}
                       for n in names},
        result.jobs, left_out, _bookkeeping(reports, present, missing)))
    _write(out, option, plots, reports, text, result, record, warnings)
    return Merged(out, result, present, missing, warnings)


@dataclass(frozen=True)
class _Order:
    """Where a pair goes in the unsharded run's order: cases as discovered, adapters as selected
    (each by its index in :func:`_order`)."""

    cases: dict[str, int]
    adapters: dict[str, int]

    @classmethod
    def of(cls, reports: list[ReportFolder]) -> _Order:
        return cls({n: k for k, n in enumerate(_order(reports, "cases"))},
                   {n: k for k, n in enumerate(_order(reports, "adapters"))})

    def place(self, case: str, adapter: str) -> tuple[int, int]:
        return self.cases[case], self.adapters[adapter]


def _cases(reports: list[ReportFolder]) -> dict[str, Case]:
    """Every pair's case, from its recorded spec (:func:`_case`)."""
    cases: dict[str, Case] = {}
    for r in reports:
        for p in r.run.pairs:
            if p.case not in cases:
                cases[p.case] = _case(p.case, r.run.cases.get(p.case), r.folder)
    return cases


def _divergence_text(reports: list[ReportFolder], order: _Order) -> pd.DataFrame:
    """divergence.csv: the text as written, in the run's pair order, rows of a pair kept in
    their order; a row of a pair no run.json lists is refused."""
    import pandas as pd

    text = pd.concat([r.text for r in reports], ignore_index=True)
    unknown = [pair_id(c, a) for c, a in zip(text["case"], text["adapter"], strict=True)
               if c not in order.cases or a not in order.adapters]
    if unknown:
        raise HarnessError(f"divergence.csv has rows of {unknown[0][:120]}, a pair run.json "
                           "does not list", file=next(r.folder for r in reports))
    keys = [order.place(c, a) for c, a in zip(text["case"], text["adapter"], strict=True)]
    return text.iloc[sorted(range(len(text)), key=lambda i: keys[i])] if len(text) else text


def _rows_of(reports: list[ReportFolder]) -> dict[tuple[str, str], pd.DataFrame]:
    """Each pair's divergence rows, numbers as numbers, by (case, adapter)."""
    import pandas as pd

    numbers = pd.concat([r.rows for r in reports], ignore_index=True)
    return {key: part.reset_index(drop=True)
            for key, part in numbers.groupby(["case", "adapter"], sort=False)}


def _pair_results(reports: list[ReportFolder], order: _Order,
                  rows_of: dict[tuple[str, str], pd.DataFrame],
                  verdicts: dict[tuple[str, str], Verdict]) -> list[PairResult]:
    """The pairs of every shard in the run's order, with their rows, tracebacks and verdicts."""
    details: dict[str, str] = {}
    entries = []
    for r in reports:
        details.update(r.errors)
        entries += list(r.run.pairs)
    entries.sort(key=lambda p: order.place(p.case, p.adapter))
    return [PairResult(p.case, p.adapter, p.status, p.reason or "", p.seconds,
                       rows_of.get((p.case, p.adapter)),
                       detail=details.get(pair_id(p.case, p.adapter), ""),
                       attribution=p.attribution or "",
                       verdict=verdicts.get((p.case, p.adapter)))
            for p in entries]


def _case_entries(reports: list[ReportFolder],
                  cases: dict[str, Case]) -> tuple[dict[str, dict], dict[str, str]]:
    """run.json's entry of each case with a pair (its prepare seconds summed over the shards),
    and the case errors of every shard."""
    cases_doc: dict[str, dict] = {}
    case_errors: dict[str, str] = {}
    for r in reports:
        for name, entry in r.run.cases.items():
            if name not in cases:
                continue
            if name not in cases_doc:
                cases_doc[name] = dict(entry.model_dump(mode="json", exclude_unset=True),
                                       prepare_seconds=0.0)
            cases_doc[name]["prepare_seconds"] += entry.prepare_seconds
        case_errors.update(r.run.case_errors)
    return cases_doc, case_errors


def _result(reports: list[ReportFolder], order: _Order, cases: dict[str, Case],
            pairs: list[PairResult], cases_doc: dict[str, dict],
            case_errors: dict[str, str]) -> RunResult:
    """The RunResult the unsharded run would have given, rebuilt from the shards (seconds
    summed, the blind-spot checks combined), for the same writers to render."""
    names = sorted(cases, key=order.cases.__getitem__)
    prepare_seconds = {n: cases_doc[n]["prepare_seconds"] for n in names}
    adapters = [ADAPTERS.get(n) or _Unknown(n) for n in order.adapters]
    seconds = sum(r.run.seconds for r in reports)
    result = RunResult([cases[n] for n in names], adapters, pairs, prepare_seconds,
                       {n: case_errors[n] for n in names if n in case_errors}, seconds)
    result.blind = _blind_checks(reports, names, list(order.adapters))
    result.jobs = max((r.run.jobs or 1) for r in reports)
    result.memory_limits = (reports[0].run.model_extra or {}).get("memory_limits")
    return result


def _bookkeeping(reports: list[ReportFolder], present: list[str], missing: list[str]) -> dict:
    """run.json's record of the shards merged: each shard's run, the whole run's cases and
    adapters, the shards missing."""
    bookkeeping: dict = {
        "shards": present,
        "shard_runs": {_label(r): {
            "folder": str(r.folder), "created": r.run.created,
            "seconds": r.run.seconds, "jobs": r.run.jobs,
            "platform": r.run.platform, "machine": r.run.machine,
            "pairs": len(r.run.pairs), **{s: getattr(r.run, s) for s in ENVIRONMENT}}
            for r in reports}}
    whole = next((r.run.shard_of for r in reports if r.run.shard_of), None)
    if whole:
        bookkeeping["shard_of"] = whole.model_dump(mode="json", exclude_unset=True)
    if missing:
        bookkeeping["missing_shards"] = missing
    return bookkeeping


def _write(out: Path, option: str, plots: str, reports: list[ReportFolder], text: pd.DataFrame,
           result: RunResult, record: RunRecord, warnings: list[str]) -> None:
    """The merged report folder, whole or not at all, as for `run`."""
    from harness.report.html import html_report
    from harness.report.layouts_md import layouts_markdown
    from harness.report.summary import summary_markdown

    with report_folder.report_errors(out), swap.staged(out, option) as partial:
        write_text(partial / "divergence.csv", text.to_csv(index=False))
        write_text(partial / "summary.md", _with_note(summary_markdown(result), reports,
                                                      warnings))
        write_text(partial / "layouts.md", layouts_markdown(result))
        report_folder.write_run(partial, record)
        report_folder.write_errors(partial, ((pair_id(p.case, p.adapter), p.detail)
                                             for p in result.pairs))
        write_text(partial / "index.html", html_report(result, partial, plots))
        for r in reports:
            report_folder.copy_outputs(r.folder, partial)


def _with_note(summary: str, reports: list[ReportFolder], warnings: list[str]) -> str:
    """summary.md with a line naming the shards (and the warnings) under its headline."""
    names = ", ".join(_label(r) for r in reports)
    note = [f"Merged from {len(reports)} report folder(s): {names} (seconds summed over them)."]
    note += [f"**Warning**: {w}." for w in warnings]
    lines = summary.split("\n")
    at = 3 if len(lines) > 2 and lines[0].startswith("# ") else 0
    # the warnings quote the shards' run.json (versions, platforms): no escape sequences
    return printable_lines("\n".join(lines[:at] + [""] + note + lines[at:]))
