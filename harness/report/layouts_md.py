"""layouts.md: the mapping tables of the adapters that ran, at each case's sizes."""

from __future__ import annotations

from tabulate import tabulate

from harness.layouts.base import Layout
from harness.spec import Case


def mapping_markdown(layout: Layout, case: Case) -> str:
    lines = [f"### `{layout.name}`: {layout.title} — case `{case.name}`", ""]
    lines.append(f"H={case.hidden_size}, I={case.input_size}"
                 + (f", P={case.proj_size}" if case.proj_size else "")
                 + f", layers={case.num_layers}, {case.dir_mode}")
    lines.append("")
    lines.append(tabulate([list(r.values()) for r in layout.mapping(case)],
                          headers=["tensor", "shape", "slice", "holds"], tablefmt="github"))
    notes = layout.runtime(case)
    if case.forget_bias:
        folded = any(pl.fold_forget_bias for t in layout.tensors(case) for pl in t.placements)
        notes = [*notes, f"forget_bias {case.forget_bias} is stored in the bias (folded)" if folded
                 else f"forget gate gets +{case.forget_bias} at run time (stored nowhere)"]
    if notes:
        lines += ["", "At run time:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def layouts_markdown(result) -> str:
    lines = ["# Layout mapping tables", "",
             "Each row: which slice of which native tensor holds which canonical block. "
             "Generated from the layout descriptions the adapters ran with.", ""]
    ran = [p for p in result.pairs if p.rows is not None or p.status == "baseline"]
    adapters = {a.name: a for a in result.adapters}
    seen = set()
    for p in ran:
        layout = adapters[p.adapter].layout
        if layout is None or layout.name == "canonical" or (layout.name, p.case) in seen:
            continue
        seen.add((layout.name, p.case))
        case = next(c for c in result.cases if c.name == p.case)
        lines.append(mapping_markdown(layout, case))
    return "\n".join(lines)
