"""``rnn-harness merge OUT SHARD...``: one report folder from the folders of ``run --shard K/N``.

The merged folder is the report the unsharded run would have written (the report folder
``run`` writes): ``divergence.csv`` rows (copied as text, not re-formatted) and run.json ``pairs``
in
the unsharded order (cases as discovered, adapters as selected, which every shard records in
run.json ``shard_of``); ``summary.md``, ``layouts.md`` and ``index.html`` rendered again by the
same writers from a RunResult rebuilt from the shards' CSV rows and run.json (cases from their
recorded ``spec``, adapters from the registry); ``errors.log`` and ``outputs/`` combined.
What differs from an unsharded run: timings (summed over shards), run.json ``shards`` /
``shard_runs`` (each shard's folder, time, platform and versions) instead of ``shard``, and a
line in summary.md naming the shards, with a warning when they ran with different framework
versions, precision flags or adapter availability.

Refused (HarnessError, exit 2): a folder that is not a shard, shards of different runs (other
cases or adapters), a pair in two folders, a shard given twice, and an incomplete set of shards;
``allow_partial`` accepts all but the overlaps, and the report says what is missing.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from harness import compare
from harness.adapters import ADAPTERS, Adapter
from harness.cases import load_cases
from harness.compare import METRICS
from harness.diff import check_numeric, check_run_doc, report_files
from harness.errors import HarnessError
from harness.npz import write_text
from harness.report.folder import check_writable, report_errors, staged
from harness.runner import PairResult, RunResult
from harness.shard import pair_id
from harness.spec import Case

ENVIRONMENT = ("versions", "precision_flags")  # per shard; a difference is warned about


@dataclass
class ShardReport:
    """One folder to merge: its run.json, its CSV rows (as text, and as numbers) and errors."""

    folder: Path
    run: dict
    text: pd.DataFrame  # divergence.csv, every cell the string written
    rows: pd.DataFrame  # the same rows, typed like harness.compare.divergence's
    details: dict[str, str]  # errors.log: pair id -> traceback

    @property
    def shard(self) -> str | None:
        return self.run.get("shard")

    @property
    def pairs(self) -> list[str]:
        return [pair_id(p["case"], p["adapter"]) for p in self.run.get("pairs", [])]


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


def _read_errors(path: Path) -> dict[str, str]:
    """errors.log as written by harness.report.write_report: ``== case::adapter`` sections."""
    if not path.is_file():
        return {}
    # tracebacks from anywhere: undecodable bytes are shown, not fatal
    parts = re.split(r"(?m)^== (.+)\n", path.read_text(encoding="utf-8", errors="replace"))
    details = {}
    for k in range(1, len(parts), 2):
        text = parts[k + 1]
        if k + 2 < len(parts) and text.endswith("\n"):  # the separator write_report joins with
            text = text[:-1]
        details[parts[k]] = text
    return details


def load_shard(folder: str | Path) -> ShardReport:
    folder, csv, run = report_files(folder)
    try:
        doc = json.loads(run.read_text())
        text = pd.read_csv(csv, dtype=str, keep_default_na=False)
        rows = pd.read_csv(csv, dtype={"case": str, "adapter": str, "output": str,
                                       "verdict": str})
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise HarnessError(f"unreadable ({str(exc).splitlines()[0][:200]})",
                           file=folder) from None
    check_run_doc(doc, run)
    check_numeric(rows, csv, ("layer", "direction", "t", *METRICS))
    for c in ("direction", "t"):  # nullable, as harness.compare writes them
        if c in rows.columns:
            rows[c] = rows[c].astype("Int64")
    if not {"case", "adapter"} <= set(text.columns):
        raise HarnessError("columns missing: case, adapter", file=csv)
    for frame in (text, rows):  # reports from before step mode: every row free-running
        if "mode" not in frame.columns:
            frame.insert(frame.columns.get_loc("adapter") + 1, "mode", compare.FREE)
    return ShardReport(folder, doc, text, rows, _read_errors(folder / "errors.log"))


def _check(reports: list[ShardReport], allow_partial: bool) -> tuple[list[str], list[str]]:
    """The shard ids present and missing; HarnessError for what cannot be merged."""
    owner: dict[str, Path] = {}
    for r in reports:
        for pid in r.pairs:
            if pid in owner:
                raise HarnessError(f"pair {pid} is in two report folders ({owner[pid]} and "
                                   f"{r.folder}): the shards overlap")
            owner[pid] = r.folder
    not_shards = [r for r in reports if not r.shard]
    if not_shards and not allow_partial:
        raise HarnessError("not a shard (its run.json has no shard: it was not run with "
                           "`run --shard K/N`; use --allow-partial to merge it anyway)",
                           file=not_shards[0].folder)
    given: dict[str, Path] = {}
    counts = set()
    for r in reports:
        if not r.shard:
            continue
        if r.shard in given:
            raise HarnessError(f"shard {r.shard} is given twice ({given[r.shard]} and "
                               f"{r.folder})")
        given[r.shard] = r.folder
        counts.add(int(r.shard.split("/")[1]))
    if len(counts) > 1 and not allow_partial:
        raise HarnessError("shards of different splits: " + ", ".join(sorted(given))
                           + " (every folder must come from the same `run --shard K/N` with "
                             "one N)")
    wholes = {json.dumps(r.run.get("shard_of"), sort_keys=True) for r in reports if r.shard}
    if len(wholes) > 1 and not allow_partial:
        raise HarnessError("the shards come from different runs: their cases or adapters differ "
                           "(run.json shard_of); use --allow-partial to merge them anyway")
    missing = [f"{k}/{n}" for n in sorted(counts) for k in range(1, n + 1)
               if f"{k}/{n}" not in given]
    if missing and not allow_partial:
        raise HarnessError(f"missing shard(s) {', '.join(missing)}: give every shard's folder "
                           "(or --allow-partial to merge those there are)")
    present = sorted(given, key=lambda s: tuple(int(x) for x in s.split("/"))[::-1])
    return present, missing


def _order(reports: list[ShardReport], key: str) -> list[str]:
    """The whole run's order of cases or adapters (shard_of), then any others as first seen."""
    names: dict[str, None] = {}
    for r in reports:
        for n in (r.run.get("shard_of") or {}).get(key, []):
            names.setdefault(n)
    for r in reports:
        for p in r.run.get("pairs", []):
            names.setdefault(p["case" if key == "cases" else "adapter"])
    return list(names)


def _case(name: str, entry: dict, folder: Path) -> Case:
    """The case as the shard ran it: its recorded spec, else its file."""
    source = entry.get("file")
    if "spec" in entry:
        try:
            return Case.model_validate({**entry["spec"], "source": source})
        except ValidationError as exc:
            raise HarnessError(f"case {name!r}: recorded spec does not validate "
                               f"({exc.error_count()} error(s))",
                               file=folder / "run.json") from None
    if source and Path(source).is_file():
        for case in load_cases(source):
            if case.name == name:
                return case
    raise HarnessError(f"case {name!r}: run.json records no spec and its file {source!r} does "
                       "not hold it", file=folder / "run.json")


def _differences(reports: list[ShardReport]) -> tuple[dict[str, dict], list[str]]:
    """Per ENVIRONMENT section the merged dict (a key the shards disagree on holds every value
    with its shards) and warnings."""
    merged: dict[str, dict] = {}
    warnings = []
    for section in ENVIRONMENT:
        values: dict[str, dict[str, list[str]]] = {}
        for r in reports:
            for k, v in (r.run.get(section) or {}).items():
                values.setdefault(k, {}).setdefault(json.dumps(v), []).append(
                    r.shard or str(r.folder))
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


def _adapters(reports: list[ShardReport]) -> tuple[dict[str, dict], list[str]]:
    merged: dict[str, dict] = {}
    warnings = []
    for name in _order(reports, "adapters"):
        entries = [(r.shard or str(r.folder), r.run.get("adapters", {}).get(name))
                   for r in reports]
        entries = [(s, e) for s, e in entries if e is not None]
        if not entries:
            continue
        available = [s for s, e in entries if e.get("available")]
        merged[name] = next((e for _, e in entries if e.get("available")), entries[0][1])
        if available and len(available) < len(entries):
            missing = [f"{s} ({e.get('reason')})" for s, e in entries if not e.get("available")]
            warnings.append(f"adapter {name} was available in {', '.join(available)} but not "
                            f"in {', '.join(missing)}")
    return merged, warnings


def merge_reports(out: str | Path, folders: list[str | Path], *, allow_partial: bool = False,
                  plots: str = "failed") -> Merged:
    """Merge shard report folders into ``out`` (see the module docstring); ``plots``: which
    pairs index.html draws plots for, as in :func:`harness.report.write_report`."""
    from harness.report.html import html_report
    from harness.report.layouts_md import layouts_markdown
    from harness.report.summary import summary_markdown

    if not folders:
        raise HarnessError("no report folders to merge")
    out = check_writable(out, "OUT_DIR")
    reports = [load_shard(f) for f in folders]
    for r in reports:
        if out.resolve() == r.folder.resolve():
            raise HarnessError("the merged report would overwrite a shard's folder; give "
                               "another OUT_DIR", file=out)
    present, missing = _check(reports, allow_partial)
    reports.sort(key=lambda r: (0, int(r.shard.split("/")[0])) if r.shard else (1, 0))

    case_order = {n: k for k, n in enumerate(_order(reports, "cases"))}
    adapter_names = _order(reports, "adapters")
    adapter_order = {n: k for k, n in enumerate(adapter_names)}

    def place(case: str, adapter: str) -> tuple[int, int]:
        return case_order[case], adapter_order[adapter]

    # divergence.csv: the text as written, rows of a pair kept in their order
    text = pd.concat([r.text for r in reports], ignore_index=True)
    keys = [place(c, a) for c, a in zip(text["case"], text["adapter"], strict=True)]
    text = text.iloc[sorted(range(len(text)), key=lambda i: keys[i])] if len(text) else text
    numbers = pd.concat([r.rows for r in reports], ignore_index=True)
    rows_of = {key: part.reset_index(drop=True)
               for key, part in numbers.groupby(["case", "adapter"], sort=False)}

    details: dict[str, str] = {}
    entries: list[tuple[dict, ShardReport]] = []
    for r in reports:
        details.update(r.details)
        entries += [(p, r) for p in r.run.get("pairs", [])]
    entries.sort(key=lambda e: place(e[0]["case"], e[0]["adapter"]))
    pairs = [PairResult(p["case"], p["adapter"], p["status"], p.get("reason") or "",
                        float(p.get("seconds") or 0.0),
                        detail=details.get(pair_id(p["case"], p["adapter"]), ""),
                        attribution=p.get("attribution") or "")
             for p, _ in entries]
    for p in pairs:
        p.rows = rows_of.get((p.case, p.adapter))

    ran = {p.case for p in pairs}
    cases_doc: dict[str, dict] = {}
    cases: dict[str, Case] = {}
    case_errors: dict[str, str] = {}
    for r in reports:
        for name, entry in r.run.get("cases", {}).items():
            if name not in ran:
                continue
            if name not in cases:
                cases[name] = _case(name, entry, r.folder)
                cases_doc[name] = dict(entry, prepare_seconds=0.0)
            cases_doc[name]["prepare_seconds"] += float(entry.get("prepare_seconds") or 0.0)
        case_errors.update(r.run.get("case_errors") or {})
    names = sorted(cases, key=case_order.__getitem__)
    prepare_seconds = {n: cases_doc[n]["prepare_seconds"] for n in names}

    adapters = [ADAPTERS.get(n) or _Unknown(n) for n in adapter_names]
    seconds = sum(float(r.run.get("seconds") or 0.0) for r in reports)
    result = RunResult([cases[n] for n in names], adapters, pairs, prepare_seconds,
                       {n: case_errors[n] for n in names if n in case_errors}, seconds)

    environment, warnings = _differences(reports)
    adapters_doc, more = _adapters(reports)
    warnings += more
    first = reports[0].run
    doc = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": first.get("platform"),
        "machine": first.get("machine"),
        **environment,
        "adapters": adapters_doc,
        "cases": {n: dict(cases_doc[n], prepare_seconds=round(prepare_seconds[n], 4))
                  for n in names},
        "case_errors": result.case_errors,
        "pairs": [p for p, _ in entries],
        "seconds": round(seconds, 3),
        "shards": present,
        "shard_runs": {r.shard or str(r.folder): {
            "folder": str(r.folder), "created": r.run.get("created"),
            "seconds": r.run.get("seconds"), "jobs": r.run.get("jobs"),
            "platform": r.run.get("platform"), "machine": r.run.get("machine"),
            "pairs": len(r.pairs), **{s: r.run.get(s, {}) for s in ENVIRONMENT}}
            for r in reports},
    }
    whole = next((r.run["shard_of"] for r in reports if r.run.get("shard_of")), None)
    if whole:
        doc["shard_of"] = whole
    if missing:
        doc["missing_shards"] = missing
    if missing:
        warnings.insert(0, f"partial merge: shard(s) {', '.join(missing)} missing, their pairs "
                           "are not in this report")

    with report_errors(out), staged(out) as partial:  # whole or not at all, as for `run`
        write_text(partial / "divergence.csv", text.to_csv(index=False))
        write_text(partial / "summary.md", _with_note(summary_markdown(result), reports,
                                                      warnings))
        write_text(partial / "layouts.md", layouts_markdown(result))
        write_text(partial / "run.json", json.dumps(doc, indent=2, default=str) + "\n")
        errors = [p for p in pairs if p.detail]
        if errors:
            write_text(partial / "errors.log",
                       "\n".join(f"== {p.case}::{p.adapter}\n{p.detail}" for p in errors))
        write_text(partial / "index.html", html_report(result, partial, plots))
        for r in reports:
            if (r.folder / "outputs").is_dir():
                shutil.copytree(r.folder / "outputs", partial / "outputs", dirs_exist_ok=True)
    return Merged(out, result, present, missing, warnings)


def _with_note(summary: str, reports: list[ShardReport], warnings: list[str]) -> str:
    """summary.md with a line naming the shards (and the warnings) under its headline."""
    names = ", ".join(f"{r.shard or r.folder}" for r in reports)
    note = [f"Merged from {len(reports)} report folder(s): {names} (seconds summed over them)."]
    note += [f"**Warning**: {w}." for w in warnings]
    lines = summary.split("\n")
    at = 3 if len(lines) > 2 and lines[0].startswith("# ") else 0
    return "\n".join(lines[:at] + [""] + note + lines[at:])
