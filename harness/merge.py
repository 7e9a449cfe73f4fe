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

The shards are read, and the merged folder written, by :mod:`harness.report.folder` (the run
record validated there: a shard count beyond the bound, a newer schema, a malformed field).
Refused here (HarnessError, exit 2): a folder that is not a shard, shards of different runs
(other cases or adapters), a pair in two folders, a shard given twice, an incomplete set of
shards, a pair whose case has no recorded spec (or another case's), a pair whose status in
run.json is not the one its divergence.csv rows and recorded spec give (the run's own verdict
function, :func:`harness.compare.pair_status`: verdicts are derived, never taken on trust; a
quantized pair's SQNR over y from its rows, which its record must agree with:
:func:`harness.quantization.sqnr_of_rows`), and an OUT_DIR that would replace a shard;
``allow_partial`` accepts all but the overlaps, and the report says what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from harness import blind, compare, known_bugs
from harness.adapters import ADAPTERS, Adapter
from harness.errors import HarnessError, printable_lines
from harness.npz import write_text
from harness.report import folder as report_folder
from harness.report.folder import ReportFolder, read_report
from harness.report.record import SCHEMA_VERSION, CaseRecord, RunRecord
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


def _check_statuses(reports: list[ReportFolder], cases: dict[str, Case],
                    rows_of: dict[tuple[str, str], pd.DataFrame]) -> None:
    """Each pair's status in a shard's run.json is the one its recorded rows and spec give
    (:func:`harness.compare.pair_status`, as the run judged it): a pair with rows compared
    something, a compared pair has rows, and the verdict and the case's ``expected:`` reading
    of its rows is its status. Anything else is a shard edited or corrupted since it ran: an
    error naming the shard, never a verdict taken on trust."""
    weights_of: dict[str, dict | None] = {}  # case -> its weights where the spec gives them
    for r in reports:
        for p in r.run.pairs:
            rows = rows_of.get((p.case, p.adapter))
            pid = pair_id(p.case, p.adapter)[:160]
            compared = p.status in compare.COMPARED
            if rows is None or rows.empty:
                if compared:
                    raise HarnessError(f"pair {pid} is {p.status!r} in run.json but has no rows "
                                       "in divergence.csv", file=r.folder / "run.json",
                                       field="pairs")
                continue
            if not compared:
                raise HarnessError(f"pair {pid} is {p.status[:40]!r} in run.json but has "
                                   "divergence.csv rows: it compared outputs",
                                   file=r.folder / "run.json", field="pairs")
            case = cases[p.case]
            if judged_quantized(case, p.adapter):
                statuses = _quantized_statuses(rows, case, p, r.folder / "run.json")
                if p.status not in statuses:
                    raise HarnessError(f"pair {pid} is {p.status!r} in run.json, but its "
                                       f"divergence.csv rows and SQNR record give "
                                       f"{statuses[0]!r}: the shard was changed after it ran",
                                       file=r.folder / "run.json", field="pairs")
                continue
            floor_factor = compare.tolerance_for(case, p.adapter).floor_factor
            weights = None  # drawn only for an adapter the registry holds a bug of
            if known_bugs.for_adapter(p.adapter):
                if p.case not in weights_of:
                    weights_of[p.case] = _weights(case)
                weights = weights_of[p.case]
            statuses = _statuses_of(rows, case, p.adapter, floor_factor, weights)
            if p.status not in statuses:
                raise HarnessError(f"pair {pid} is {p.status!r} in run.json, but its "
                                   f"divergence.csv rows and the case's recorded spec give "
                                   f"{statuses[0]!r}: the shard was changed after it ran",
                                   file=r.folder / "run.json", field="pairs")


def judged_quantized(case: Case, adapter: str) -> bool:
    """Whether a pair is judged as a quantized one: its case has ``quantization:`` and its
    adapter is not one this installation knows as a float runtime (a float adapter runs a
    quantized case as a float pair). Decided by the case and the registry, never by the rows'
    columns, which a shard may have blanked."""
    known = ADAPTERS.get(adapter)
    return case.quantization is not None and (known is None or known.quantized)


def _quantized_statuses(rows: pd.DataFrame, case: Case, p: Any, run_json: Path
                        ) -> tuple[str, ...]:
    """The statuses a quantized pair's rows give: the kernel question from their output
    steps, the cost question from the SQNR over y their cost columns give again
    (:func:`harness.quantization.sqnr_of_rows`), which run.json's record must agree with, and
    the record's ideal SQNR (an ideal quantization's figure, which the rows cannot give), by
    the run's rule (:func:`harness.quantization.cost_status`); read against the known bugs on
    the case alone (merge has neither the weights of a weights file nor the outputs): that
    reading, or the plain status where an entry applies."""
    from harness import quantization

    pid = pair_id(p.case, p.adapter)[:160]
    record = p.quantization
    if not isinstance(record, dict) or "sqnr_db" not in record or "ideal_sqnr_db" not in record:
        raise HarnessError(f"pair {pid} has quantization rows (sqnr_db) but no SQNR record in "
                           "run.json (quantization: {sqnr_db, ideal_sqnr_db})", file=run_json,
                           field="pairs")
    given = quantization.sqnr_of_rows(rows)
    if given.missing:
        raise HarnessError(f"pair {pid} is a quantized pair (its case has quantization:), but "
                           f"{given.missing} of its y rows in divergence.csv have no SQNR and "
                           "RMSE (sqnr_db, rmse_steps): the shard was changed after it ran",
                           file=run_json, field="pairs")
    recorded = record["sqnr_db"]
    if not given.allows(recorded):  # run.json's record is validated: numbers or None
        shown = "inf" if recorded is None else f"{recorded:.4g}"
        bound = "" if given.exact else "at least "
        raise HarnessError(f"pair {pid} has an SQNR over y of {shown} dB in run.json, but its "
                           f"divergence.csv rows give {bound}{given.db:.4g} dB: the shard was "
                           "changed after it ran", file=run_json, field="pairs")
    total = given.db if given.exact else recorded
    verdict, _ = compare.pair_status(rows, case, p.adapter, None, expected=False)
    plain, _ = quantization.cost_status(case, verdict, None if total == float("inf") else total,
                                        record["ideal_sqnr_db"])
    read, _ = compare.as_expected(plain, "", case, p.adapter, None)
    return (read, plain) if read != plain else (read,)


def _weights(case: Case) -> dict | None:
    """The case's weights where the spec alone gives them (drawn from its seed), else None:
    a weights file of another job is not read."""
    from harness import params

    return params.generate(case).tensors if case.weights is None else None


def _statuses_of(rows: pd.DataFrame, case: Case, adapter: str, floor_factor: float | None,
                 weights: dict | None) -> tuple[str, ...]:
    """The statuses the run may have given these rows, the one derived with what merge knows
    first. One, except where a registry entry's condition reads the weights or the outputs that
    merge does not have (a weights file; the check that the entry explains a divergence,
    harness.runner): then also the plain verdict."""
    derived, _ = compare.pair_status(rows, case, adapter, floor_factor, weights=weights)
    entry = None if adapter in case.expected else known_bugs.known_bug(case, adapter, weights)
    if entry is not None and (weights is None or entry.reading is not None):
        return derived, compare.pair_status(rows, case, adapter, floor_factor, expected=False)[0]
    return (derived,)


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
    owned = report_folder.owned_entries(out, option) if out.is_dir() else set()
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
    import pandas as pd

    from harness.report.html import html_report
    from harness.report.layouts_md import layouts_markdown
    from harness.report.summary import summary_markdown

    if not folders:
        raise HarnessError("no report folders to merge")
    out = report_folder.check_writable(out, option)
    reports = [read_report(f) for f in folders]
    _check_out(out, reports, option)
    present, missing = _check(reports, allow_partial)
    reports.sort(key=lambda r: (0, r.run.shard_index) if r.run.shard else (1, 0))

    case_order = {n: k for k, n in enumerate(_order(reports, "cases"))}
    adapter_names = _order(reports, "adapters")
    adapter_order = {n: k for k, n in enumerate(adapter_names)}

    def place(case: str, adapter: str) -> tuple[int, int]:
        return case_order[case], adapter_order[adapter]

    # every pair's case with its recorded spec, before anything is rendered from them
    cases: dict[str, Case] = {}
    for r in reports:
        for p in r.run.pairs:
            if p.case not in cases:
                cases[p.case] = _case(p.case, r.run.cases.get(p.case), r.folder)
    report_folder.check_names(out, report_folder.report_names(
        [(p.case, p.adapter) for r in reports for p in r.run.pairs], outputs=True), option)

    # divergence.csv: the text as written, rows of a pair kept in their order
    text = pd.concat([r.text for r in reports], ignore_index=True)
    unknown = [pair_id(c, a) for c, a in zip(text["case"], text["adapter"], strict=True)
               if c not in case_order or a not in adapter_order]
    if unknown:
        raise HarnessError(f"divergence.csv has rows of {unknown[0][:120]}, a pair run.json "
                           "does not list", file=next(r.folder for r in reports))
    keys = [place(c, a) for c, a in zip(text["case"], text["adapter"], strict=True)]
    text = text.iloc[sorted(range(len(text)), key=lambda i: keys[i])] if len(text) else text
    numbers = pd.concat([r.rows for r in reports], ignore_index=True)
    rows_of = {key: part.reset_index(drop=True)
               for key, part in numbers.groupby(["case", "adapter"], sort=False)}
    _check_statuses(reports, cases, rows_of)

    details: dict[str, str] = {}
    entries = []
    for r in reports:
        details.update(r.errors)
        entries += list(r.run.pairs)
    entries.sort(key=lambda p: place(p.case, p.adapter))
    pairs = [PairResult(p.case, p.adapter, p.status, p.reason or "", p.seconds,
                        detail=details.get(pair_id(p.case, p.adapter), ""),
                        attribution=p.attribution or "", quantization=p.quantization)
             for p in entries]
    for p in pairs:
        p.rows = rows_of.get((p.case, p.adapter))

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
    names = sorted(cases, key=case_order.__getitem__)
    prepare_seconds = {n: cases_doc[n]["prepare_seconds"] for n in names}

    adapters = [ADAPTERS.get(n) or _Unknown(n) for n in adapter_names]
    seconds = sum(r.run.seconds for r in reports)
    result = RunResult([cases[n] for n in names], adapters, pairs, prepare_seconds,
                       {n: case_errors[n] for n in names if n in case_errors}, seconds)
    result.blind = _blind_checks(reports, names, adapter_names)

    environment, warnings = _differences(reports)
    adapters_doc, more = _adapters(reports)
    warnings += more
    first = reports[0].run
    doc = {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": first.platform,
        "machine": first.machine,
        **environment,
        "adapters": adapters_doc,
        "cases": {n: dict(cases_doc[n], prepare_seconds=round(prepare_seconds[n], 4))
                  for n in names},
        "case_errors": result.case_errors,
        "blind_spots": {n: c.warning for n, c in result.blind.items() if c.warning},
        "blind_checks": {n: c.record() for n, c in result.blind.items()
                         if not c.recorded_warning},
        "pairs": [p.model_dump(mode="json", exclude_unset=True) for p in entries],
        "seconds": round(seconds, 3),
        "shards": present,
        "shard_runs": {_label(r): {
            "folder": str(r.folder), "created": r.run.created,
            "seconds": r.run.seconds, "jobs": r.run.jobs,
            "platform": r.run.platform, "machine": r.run.machine,
            "pairs": len(r.run.pairs), **{s: getattr(r.run, s) for s in ENVIRONMENT}}
            for r in reports},
    }
    whole = next((r.run.shard_of for r in reports if r.run.shard_of), None)
    if whole:
        doc["shard_of"] = whole.model_dump(mode="json", exclude_unset=True)
    if missing:
        doc["missing_shards"] = missing
        warnings.insert(0, f"partial merge: shard(s) {', '.join(missing)} missing, their pairs "
                           "are not in this report")
    record = RunRecord.model_validate(json.loads(json.dumps(doc, default=str)))

    with report_folder.report_errors(out), report_folder.staged(out, option) as partial:
        # whole or not at all, as for `run`
        write_text(partial / "divergence.csv", text.to_csv(index=False))
        write_text(partial / "summary.md", _with_note(summary_markdown(result), reports,
                                                      warnings))
        write_text(partial / "layouts.md", layouts_markdown(result))
        report_folder.write_run(partial, record)
        report_folder.write_errors(partial, ((pair_id(p.case, p.adapter), p.detail)
                                             for p in pairs))
        write_text(partial / "index.html", html_report(result, partial, plots))
        for r in reports:
            report_folder.copy_outputs(r.folder, partial)
    return Merged(out, result, present, missing, warnings)


def _with_note(summary: str, reports: list[ReportFolder], warnings: list[str]) -> str:
    """summary.md with a line naming the shards (and the warnings) under its headline."""
    names = ", ".join(_label(r) for r in reports)
    note = [f"Merged from {len(reports)} report folder(s): {names} (seconds summed over them)."]
    note += [f"**Warning**: {w}." for w in warnings]
    lines = summary.split("\n")
    at = 3 if len(lines) > 2 and lines[0].startswith("# ") else 0
    # the warnings quote the shards' run.json (versions, platforms): no escape sequences
    return printable_lines("\n".join(lines[:at] + [""] + note + lines[at:]))
