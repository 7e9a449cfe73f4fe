"""Report folder writers (DESIGN.md "Report folder"): each renders a RunResult, none recomputes."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from harness.npz import write_text
from harness.report import plots
from harness.report.html import html_report
from harness.report.layouts_md import layouts_markdown
from harness.report.outputs import save_outputs
from harness.report.run_json import run_json
from harness.report.summary import summary_markdown
from harness.runner import RunResult


def write_report(result: RunResult, out: str | Path, *, outputs: bool = False,
                 plot_workers: int = 1) -> Path:
    """Write divergence.csv, summary.md, layouts.md, run.json (and outputs/) atomically per file.
    ``plot_workers``: processes drawing a large report's plots (the CLI gives one per usable
    CPU; 1 by default, since a spawned process imports the caller's ``__main__`` script)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # a large report's plot workers start (imports, ~1.5 s) while the other files are written
    plotted = sum(p.has_rows for p in result.pairs)
    with (plots.PlotWorkers(min(plot_workers, plotted))
          if plot_workers > 1 and plotted >= plots.MIN_PARALLEL else nullcontext()) as started:
        write_text(out / "divergence.csv",
                   result.divergence.to_csv(index=False, float_format="%.6g"))
        write_text(out / "summary.md", summary_markdown(result))
        write_text(out / "layouts.md", layouts_markdown(result))
        write_text(out / "run.json", run_json(result))
        errors = [p for p in result.pairs if p.detail]
        if errors:
            write_text(out / "errors.log",
                       "\n".join(f"== {p.case}::{p.adapter}\n{p.detail}" for p in errors))
        write_text(out / "index.html", html_report(result, out, plot_workers, started))
    if outputs:
        save_outputs(result, out / "outputs")
    return out
