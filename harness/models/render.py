"""A :class:`~harness.models.comparison.ModelComparison` shown: the table and final line
``rnn-harness compare`` prints, the ``compare.md`` and ``compare.json`` of its report folder.
Nothing here decides a verdict: it shows what the verdicts hold."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from tabulate import tabulate

from harness.errors import HarnessError, printable, printable_lines
from harness.models.comparison import ModelComparison, Pairing
from harness.models.layers import shown
from harness.models.outputs_verdict import NOT_JUDGED

REPORT_FILES = ("compare.md", "compare.json")
REPRO_FOLDER = re.compile(r"repro-[0-9]+")  # a reproducer of a pairing (harness.models.repro)


def table(result: ModelComparison) -> str:
    """One row per pairing: the shipped layer, its original, the cell and sizes, the two
    verdicts."""
    rows = [[" = ".join(shown(s.path) for s in p.shipped_all),
             " = ".join(shown(o.path) for o in p.originals)
             + ("" if p.agreed else " (nearest)"), p.shipped.sizes, p.weights.status,
             "; ".join(o.status + (f" ({o.adapter})" if o.adapter else "")
                       for o in p.all_outputs)]
            for p in result.pairings]
    rows += [[shown(u.path), "", "", "not read", ""] for u in result.unread]
    return tabulate(rows, headers=["shipped", "original", "layer", "weights", "outputs"],
                    tablefmt="github")


def details(p: Pairing) -> list[str]:
    """What a pairing that differs found, line by line: the weights, the named mistakes and
    the tensors they are in, the outputs."""
    lines = [f"{p.title()}:"]
    lines += [f"  {shown(s.path)}: {shown(s.where)}" for s in p.shipped_all if s.where]
    lines.append(f"  weights: {p.weights.reason}")
    for r in p.weights.mapping:
        lines.append(f"    {r['tensor']} {r['slice']}: holds {r['actually']}, read as "
                     f"{r['claimed']}")
    lines += [f"  outputs ({o.adapter or 'not run'}): {o.reason}" for o in p.all_outputs]
    return [printable(x) for x in lines]


def final_line(result: ModelComparison) -> str:
    n = len(result.pairings)
    bad = result.differing
    unread = "; ".join(f"{shown(u.path)!r}: {u.problem}" for u in result.unread)
    if not bad and unread:
        return printable(f"not judged: {len(result.unread)} layer(s) of {result.shipped} "
                         f"cannot be read: {unread}")
    if not bad:
        return (f"same: every recurrent layer of {result.shipped} ({n}) computes what its "
                f"layer of {result.original} computes")
    def why(p: Pairing) -> str:
        if p.mistakes:
            return " + ".join(p.mistakes)
        if not p.weights:
            return ("weights differ in " + ", ".join(p.weights.tensors[:6])
                    if p.weights.tensors else "computes differently: "
                    + "; ".join(p.weights.semantics))
        return "outputs " + ", ".join(f"{o.status} ({o.adapter})" for o in p.all_outputs
                                      if not o and o.status not in NOT_JUDGED)

    named = "; ".join(f"{shown(p.shipped.path)!r}: {why(p)}" for p in bad)
    return printable(f"differs: {len(bad)} of {n} layer(s) of {result.shipped}: {named}"
                     + (f"; not judged: {unread}" if unread else ""))


def text(result: ModelComparison) -> str:
    """What ``rnn-harness compare`` prints: the table, the details of what differs, the final
    line."""
    lines = [table(result), ""]
    for p in result.pairings:
        said = (details(p) if not p.same else
                [printable(f"{p.title()}: {s.where}") for s in p.shipped_all if s.where])
        lines += said + ([""] if said else [])
    return "\n".join(lines + [final_line(result)]) + "\n"


def markdown(result: ModelComparison) -> str:
    lines = [f"# Compare: `{result.shipped}` against `{result.original}`", "",
             table(result), ""]
    for p in result.pairings:
        lines += [f"## {p.title()}", "", f"- weights: **{p.weights.status}**: "
                  f"{p.weights.reason}"]
        lines += [f"- {shown(s.path)}: {s.where}" for s in p.shipped_all if s.where]
        lines += [f"- outputs ({o.adapter or 'not run'}): **{o.status}**: {o.reason}"
                  for o in p.all_outputs] + [""]
        if p.weights.mapping:
            lines += [tabulate([list(r.values()) for r in p.weights.mapping],
                               headers=["tensor", "slice", "read as", "holds"],
                               tablefmt="github"), ""]
    lines.append(final_line(result))
    return printable_lines("\n".join(lines)) + "\n"


def as_dict(result: ModelComparison) -> dict:
    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    def layer(la) -> dict:
        return {"path": la.path, "where": la.where, "source": la.source, "layout": la.layout,
                "stored": la.dtype,
                "case": la.case.model_dump(exclude={"source", "name", "weights", "inputs"},
                                           exclude_none=True)}

    def outputs(o) -> dict:
        return {"status": o.status, "adapter": o.adapter, "reason": o.reason, "first": o.first,
                "figures": {k: num(v) for k, v in o.figures.items()}}

    return {
        "original": result.original, "shipped": result.shipped, "same": bool(result),
        "seconds": result.seconds,
        "pairings": [{
            "shipped": layer(p.shipped), "also": [layer(s) for s in p.also],
            "originals": [layer(o) for o in p.originals],
            "agreed": p.agreed, "same": p.same,
            "weights": {"status": p.weights.status, "reason": p.weights.reason,
                        "figures": {k: num(v) for k, v in p.weights.figures.items()},
                        "tensors": list(p.weights.tensors),
                        "semantics": list(p.weights.semantics),
                        "mistakes": list(p.weights.mistakes),
                        "mapping": list(p.weights.mapping)},
            "outputs": outputs(p.outputs),
            "more_outputs": [outputs(o) for o in p.more_outputs],
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
