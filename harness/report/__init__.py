"""Report folder writers (the folder ``run --out`` writes): each renders a RunResult, none
recomputes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness import compare
from harness.npz import write_text
from harness.report.folder import report_errors, write_errors, write_run
from harness.report.html import html_report
from harness.report.html_plots import PLOT_WORDS
from harness.report.layouts_md import layouts_markdown
from harness.report.outputs import save_outputs
from harness.report.run_json import run_record
from harness.report.summary import summary_markdown
from harness.report.swap import staged
from harness.repro.write import write_all
from harness.results import RunResult
from harness.shard import pair_id


def write_report(result: RunResult, out: str | Path, *, outputs: bool = False,
                 plots: str = "failed", progress: Callable[[str], None] | None = None) -> Path:
    """Write divergence.csv, summary.md, layouts.md, run.json, index.html with its plots (those
    of the pairs that did not pass; ``plots`` "all": every pair's, "none": none), outputs/ and
    repro/ (the reproducers the run recorded, harness/repro/), as a whole: into a hidden folder
    beside ``out`` that replaces it once complete (:mod:`harness.report.swap`).
    ``progress``: called with a line as each part begins (the plots take a while). Returns
    ``out``."""
    out = Path(out)
    with report_errors(out), staged(out) as partial:
        _write(result, partial, outputs=outputs, plots=plots, progress=progress or _silent)
    return out


def _silent(line: str) -> None:
    pass


def _write(result: RunResult, out: Path, *, outputs: bool, plots: str,
           progress: Callable[[str], None]) -> None:
    progress("divergence.csv, summary.md, layouts.md, run.json")
    write_text(out / "divergence.csv", result.divergence.to_csv(index=False, float_format="%.6g"))
    write_text(out / "summary.md", summary_markdown(result))
    write_text(out / "layouts.md", layouts_markdown(result))
    write_run(out, run_record(result))
    write_errors(out, ((pair_id(p.case, p.adapter), p.detail) for p in result.pairs))
    progress(f"index.html ({PLOT_WORDS.get(plots, plots)})")
    write_text(out / "index.html", html_report(result, out, plots))
    if outputs:
        progress("outputs/")
        save_outputs(result, out / "outputs")
    records = [p for p in result.pairs if getattr(p, "repro", None) is not None]
    if records:
        progress("repro/")
        pairs = [(p.case, p.adapter, p.status) for p in result.pairs]
        write_all(out / "repro", [(p.repro, agreeing_in(pairs, p.case)) for p in records])


def agreeing_in(pairs: list[tuple[str, str, str]], case: str) -> list[str]:
    """The adapters of (case, adapter, status) ``pairs`` that passed on ``case``: they agree
    with float64 (a reproducer's README)."""
    return [a for c, a, status in pairs if c == case and status == compare.PASS]
