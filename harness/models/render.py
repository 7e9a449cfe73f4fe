"""A :class:`~harness.models.comparison.ModelComparison` shown: the table and final line
``rnn-harness compare`` prints, the ``compare.md`` and ``compare.json`` of its report folder.
Nothing here decides a verdict: it shows what the verdicts hold."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tabulate import tabulate

from harness.errors import HarnessError, printable
from harness.models.comparison import ModelComparison, Pairing
from harness.models.layers import shown

REPORT_FILES = ("compare.md", "compare.json")


def table(result: ModelComparison) -> str:
    """One row per pairing: the shipped layer, its original, the cell and sizes, the two
    verdicts."""
    rows = [[shown(p.shipped.path), " = ".join(shown(o.path) for o in p.originals)
             + ("" if p.agreed else " (nearest)"), p.shipped.sizes, p.weights.status,
             p.outputs.status + (f" ({p.outputs.adapter})" if p.outputs.adapter else "")]
            for p in result.pairings]
    return tabulate(rows, headers=["shipped", "original", "layer", "weights", "outputs"],
                    tablefmt="github")


def details(p: Pairing) -> list[str]:
    """What a pairing that differs found, line by line: the weights, the named mistakes and
    the tensors they are in, the outputs."""
    lines = [f"{p.title()}:", f"  weights: {p.weights.reason}"]
    for r in p.weights.mapping:
        lines.append(f"    {r['tensor']} {r['slice']}: holds {r['actually']}, read as "
                     f"{r['claimed']}")
    lines.append(f"  outputs ({p.outputs.adapter or 'not run'}): {p.outputs.reason}")
    return [printable(x) for x in lines]


def final_line(result: ModelComparison) -> str:
    n = len(result.pairings)
    bad = result.differing
    if not bad:
        return (f"same: every recurrent layer of {result.shipped} ({n}) computes what its "
                f"layer of {result.original} computes")
    named = "; ".join(f"{shown(p.shipped.path)!r}: " + (" + ".join(p.mistakes) if p.mistakes
                                                        else p.weights.status if not p.weights
                                                        else "outputs " + p.outputs.status)
                      for p in bad)
    return f"differs: {len(bad)} of {n} layer(s) of {result.shipped}: {printable(named)}"


def text(result: ModelComparison) -> str:
    """What ``rnn-harness compare`` prints: the table, the details of what differs, the final
    line."""
    lines = [table(result), ""]
    for p in result.differing:
        lines += details(p) + [""]
    return "\n".join(lines + [final_line(result)]) + "\n"


def markdown(result: ModelComparison) -> str:
    lines = [f"# Compare: `{result.shipped}` against `{result.original}`", "",
             table(result), ""]
    for p in result.pairings:
        lines += [f"## {p.title()}", "", f"- weights: **{p.weights.status}**: "
                  f"{p.weights.reason}",
                  f"- outputs ({p.outputs.adapter or 'not run'}): **{p.outputs.status}**: "
                  f"{p.outputs.reason}", ""]
        if p.weights.mapping:
            lines += [tabulate([list(r.values()) for r in p.weights.mapping],
                               headers=["tensor", "slice", "read as", "holds"],
                               tablefmt="github"), ""]
    lines.append(final_line(result))
    return printable("\n".join(lines)) + "\n"


def as_dict(result: ModelComparison) -> dict:
    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    def layer(la) -> dict:
        return {"path": la.path, "source": la.source, "layout": la.layout, "stored": la.dtype,
                "case": la.case.model_dump(exclude={"source", "name", "weights", "inputs"},
                                           exclude_none=True)}

    return {
        "original": result.original, "shipped": result.shipped, "same": bool(result),
        "seconds": result.seconds,
        "pairings": [{
            "shipped": layer(p.shipped), "originals": [layer(o) for o in p.originals],
            "agreed": p.agreed, "same": p.same,
            "weights": {"status": p.weights.status, "reason": p.weights.reason,
                        "figures": {k: num(v) for k, v in p.weights.figures.items()},
                        "tensors": list(p.weights.tensors),
                        "semantics": list(p.weights.semantics),
                        "mistakes": list(p.weights.mistakes),
                        "mapping": list(p.weights.mapping)},
            "outputs": {"status": p.outputs.status, "adapter": p.outputs.adapter,
                        "reason": p.outputs.reason, "first": p.outputs.first,
                        "figures": {k: num(v) for k, v in p.outputs.figures.items()}},
        } for p in result.pairings],
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
        other = sorted(e.name for e in out.iterdir() if e.name not in REPORT_FILES)
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
