"""A :class:`~harness.models.comparison.ModelComparison` shown: the table and final line
``rnn-harness compare`` prints, the ``compare.md`` and ``compare.json`` of its report folder.
Nothing here decides a verdict, nor asks which judge gave one: every verdict is shown through
its figures (:class:`~harness.models.judges.pairing.PairingFigures`: heading, table cell, lines,
compare.json record)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tabulate import tabulate

from harness.errors import HarnessError, printable, printable_lines
from harness.judges.verdict import Verdict
from harness.models.comparison import ModelComparison, Pairing
from harness.models.judges.pairing import PairingFigures
from harness.models.layers import shown

REPORT_FILES = ("compare.md", "compare.json")
REPRO_FOLDER = re.compile(r"repro-[0-9]+")  # a reproducer of a pairing (harness.models.repro)


def table(result: ModelComparison) -> str:
    """One row per pairing: the shipped layer, its original, the cell and sizes, the weights
    verdict, the outputs verdicts (each cell as its figures say)."""
    rows = [[" = ".join(shown(s.path) for s in p.shipped_all),
             " = ".join(shown(o.path) for o in p.originals)
             + ("" if p.agreed else " (nearest)"), p.shipped.sizes, _cell(p.weights),
             "; ".join(_cell(o) for o in p.all_outputs)]
            for p in result.pairings]
    rows += [[shown(u.path), "", "", "not read", ""] for u in result.unread]
    return tabulate(rows, headers=["shipped", "original", "layer", "weights", "outputs"],
                    tablefmt="github")


def _figures(v: Verdict) -> PairingFigures:
    """The verdict's figures as compare shows them: a compare judge's, else the base's
    (status and reason alone)."""
    f = v.figures
    return f if isinstance(f, PairingFigures) else PairingFigures()


def _cell(v: Verdict) -> str:
    return _figures(v).cell(v.status)


def _said(v: Verdict) -> list[str]:
    """A verdict in the printed report: its heading and reason, then its figures' lines."""
    f = _figures(v)
    return [f"  {f.heading()}: {v.reason}"] + [f"    {line}" for line in f.lines()]


def details(p: Pairing) -> list[str]:
    """What a pairing that differs found, line by line: each verdict's reason and its figures'
    lines (the named mistakes' misread slices under the weights)."""
    lines = [f"{p.title()}:"]
    lines += [f"  {shown(s.path)}: {shown(s.where)}" for s in p.shipped_all if s.where]
    for v in p.verdicts:
        lines += _said(v)
    return [printable(x) for x in lines]


def not_run_lines(p: Pairing) -> list[str]:
    """A pairing that is the same: where it is, and each verdict not run here, with why."""
    lines = [f"{p.title()}: {s.where}" for s in p.shipped_all if s.where]
    if p.not_run and not lines:
        lines.append(f"{p.title()}:")
    lines += [f"  {_figures(v).heading()}: not run here ({v.status}): {v.reason}"
              for v in p.not_run]
    return [printable(x) for x in lines]


def final_line(result: ModelComparison) -> str:
    n = len(result.pairings)
    bad = result.differing
    unread = "; ".join(f"{shown(u.path)!r}: {u.problem}" for u in result.unread)
    if not bad and unread:
        return printable(f"not judged: {len(result.unread)} layer(s) of {result.shipped} "
                         f"cannot be read: {unread}")
    if not bad:
        unjudged = [p for p in result.pairings if p.not_run]
        note = ""
        if unjudged:
            what = ", ".join(sorted({_figures(v).heading() for p in unjudged
                                     for v in p.not_run}))
            note = (f"; not run here for {len(unjudged)} layer(s): {what} (judged without "
                    "them; why above)")
        return printable(f"same: every recurrent layer of {result.shipped} ({n}) computes "
                         f"what its layer of {result.original} computes{note}")

    def why(p: Pairing) -> str:
        return ", ".join(_figures(v).summary(v.status) for v in p.findings)

    named = "; ".join(f"{shown(p.shipped.path)!r}: {why(p)}" for p in bad)
    return printable(f"differs: {len(bad)} of {n} layer(s) of {result.shipped}: {named}"
                     + (f"; not judged: {unread}" if unread else ""))


def text(result: ModelComparison) -> str:
    """What ``rnn-harness compare`` prints: the table, the details of what differs (and of
    what was not run), the final line."""
    lines = [table(result), ""]
    for p in result.pairings:
        said = details(p) if not p.same else not_run_lines(p)
        lines += said + ([""] if said else [])
    return "\n".join(lines + [final_line(result)]) + "\n"


def markdown(result: ModelComparison) -> str:
    lines = [f"# Compare: `{result.shipped}` against `{result.original}`", "",
             table(result), ""]
    for p in result.pairings:
        lines += [f"## {p.title()}", ""]
        lines += [f"- {shown(s.path)}: {s.where}" for s in p.shipped_all if s.where]
        tables = []
        for v in p.verdicts:
            f = _figures(v)
            lines.append(f"- {f.heading()}: **{v.status}**: {v.reason}")
            shown_table = f.table()
            if shown_table is not None:
                tables += [tabulate(shown_table[1], headers=shown_table[0],
                                    tablefmt="github"), ""]
        lines += [""] + tables
    lines.append(final_line(result))
    return printable_lines("\n".join(lines)) + "\n"


def as_dict(result: ModelComparison) -> dict:
    def layer(la) -> dict:
        return {"path": la.path, "where": la.where, "source": la.source, "layout": la.layout,
                "stored": la.dtype,
                "case": la.case.model_dump(exclude={"source", "name", "weights", "inputs"},
                                           exclude_none=True)}

    def verdict(v: Verdict) -> dict:
        return {"kind": v.kind, "status": v.status, "reason": v.reason,
                **_figures(v).record()}

    return {
        "original": result.original, "shipped": result.shipped, "same": bool(result),
        "seconds": result.seconds,
        "pairings": [{
            "shipped": layer(p.shipped), "also": [layer(s) for s in p.also],
            "originals": [layer(o) for o in p.originals],
            "agreed": p.agreed, "same": p.same,
            "weights": verdict(p.weights),
            "outputs": verdict(p.outputs),
            "more_outputs": [verdict(o) for o in p.more_outputs],
        } for p in result.pairings],
        "unread": [{"path": u.path, "source": u.source, "problem": u.problem}
                   for u in result.unread],
    }


def check_folder(out: str | Path) -> Path:
    """Refuse, before anything runs, a report folder that holds anything but a compare
    report's files (someone else's: never overwritten) or that is a link."""
    from harness import safe_files

    out = Path(out)
    safe_files.check(out, field="--out")
    if out.exists() and not out.is_dir():
        raise HarnessError(f"{out} is not a folder", field="--out")
    if out.is_dir():
        other = sorted(e.name for e in out.iterdir() if e.name not in REPORT_FILES
                       and not (REPRO_FOLDER.fullmatch(e.name) and e.is_dir()
                                and not e.is_symlink()))
        if other:
            raise HarnessError(f"{out} holds other files than a compare report "
                               f"({', '.join(repr(o) for o in other[:3])}): choose an empty "
                               "or new folder", field="--out")
    return out


def write_folder(result: ModelComparison, out: str | Path) -> Path:
    """``compare.md`` and ``compare.json`` in ``out``, written without following links. A
    folder holding anything but those two (someone else's) is refused, never overwritten."""
    from harness import safe_files

    out = check_folder(out)
    safe_files.folder(out, field="--out")
    safe_files.write_text(out / "compare.md", markdown(result), out, field="--out")
    safe_files.write_text(out / "compare.json",
                          json.dumps(as_dict(result), indent=1, default=str) + "\n", out,
                          field="--out")
    return out
