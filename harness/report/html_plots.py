"""The plots of index.html: which pairs' plots a report draws (``--plots``), drawing them into
plots/ (:mod:`harness.report.plots` draws each), the sentence saying which were drawn, and each
pair's <figure>s."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from html import escape
from pathlib import Path

from harness import compare
from harness.report.folder import plot_stem
from harness.report.plots import EXTRA_PLOTS, draw_pair
from harness.results import PairResult, RunResult


def _figure(src: str, alt: str, caption: str) -> str:
    return (f'<figure><img src="plots/{src}" alt="{escape(alt)}">'
            f"<figcaption>{caption}</figcaption></figure>")


PLOTS = ("failed", "all", "none")  # which pairs' plots a report draws (--plots)


def plotted(p: PairResult, plots: str) -> bool:
    """Whether the report draws the pair's plots: with ``plots`` "failed" (the default) those
    of a pair that did not pass (DIVERGED, or an error with rows), "all": every pair with rows,
    "none": none."""
    if plots not in PLOTS:
        raise ValueError(f"plots: expected one of {', '.join(PLOTS)}, got {plots!r}")
    if plots == "none" or not p.has_rows:
        return False
    # the plots of what its judge measured beyond the rows are drawn always (a quantized
    # pair's cost: Figures.plots)
    return (plots == "all" or p.status in (compare.DIVERGED, compare.ERROR)
            or bool(p.figures.plots))


PLOT_WORDS = {"failed": "plots of the pairs that did not pass", "all": "plots of every pair",
              "none": "no plots"}
"""What ``--plots`` draws, in words (the report's progress line)."""


def plots_line(plots: str, failed: int,
                always: Mapping[tuple[str, str], int] | None = None) -> str:
    """The sentence of index.html saying which pairs' plots it shows: ``failed`` pairs that did
    not pass, and other pairs drawn for their figures' plots (drawn always), counted by the
    figures' words for them (:attr:`harness.judges.Figures.always_plot_words`)."""
    every = "(run with <code>--plots all</code> for every pair)"
    always = always or {}
    if plots == "all":
        return f"Plots: every pair with divergence rows ({failed + sum(always.values())})."
    if plots == "none":
        return "Plots: none were drawn (<code>--plots none</code>)."
    drawn = ", ".join(f"{escape(what)} of the {n} {escape(pair)}{'s' if n > 1 else ''}"
                      for (what, pair), n in always.items() if n)
    if failed:
        passed = f"; {drawn} that passed" if drawn else ""
        return (f"Plots: the {failed} pair{'s' if failed > 1 else ''} that did not pass{passed} "
                f"{every}.")
    if drawn:
        return (f"Plots: {drawn} (drawn always); no pair that did not pass has divergence rows "
                f"{every}.")
    return f"Plots: none, no pair that did not pass has divergence rows {every}."


def _plot_job(p: PairResult, case, plots: Path, n: int) -> tuple:
    """The arguments of :func:`harness.report.plots.draw_pair` for the pair."""
    return (compare.of_mode(p.rows, compare.FREE), plots,
            plot_stem(n, p.case, p.adapter),
            f"{p.case} :: {p.adapter} ({case.dtype})")


EXTRA_FIGURES = {"cost": ("quant", "quantization cost per timestep",
                          "SQNR (dB) of <code>y</code> against the float64 reference, RMSE in "
                          "output steps (dotted)")}
"""The extra plots a judge's figures name (:attr:`harness.judges.Figures.plots`): file suffix,
alt text and caption (:data:`harness.report.plots.EXTRA_PLOTS` draws them)."""



def pair_figures(p: PairResult, job: tuple | None, drawn: tuple[bool, ...]) -> str:
    """The pair's <figure>s for the plots ``drawn``; empty when its plots were not drawn."""
    if job is None:
        return ""
    _, _, stem, title = job
    who = escape(p.adapter)
    figs = []
    if drawn[0]:
        figs.append(_figure(f"{stem}.png", f"error against timestep, {title}",
                            f"{who}: error against timestep"))
    else:
        figs.append(f'<p class="meta">{who}: every forward error is exactly 0.</p>')
    if drawn[1]:
        figs.append(_figure(f"{stem}-layers.png", f"layer x timestep, {title}",
                            f"{who}: every layer's <code>y</code>, layer x timestep"))
    if drawn[2]:
        figs.append(_figure(f"{stem}-grad.png", f"gradient error against timestep, {title}",
                            f"{who}: <code>dx</code> against timestep, <code>dh0</code>/"
                            "<code>dc0</code> at the left"))
    if drawn[3]:
        figs.append(_figure(f"{stem}-grad-blocks.png", f"parameter gradient errors, {title}",
                            f"{who}: parameter gradients, layer/direction x block"))
    for name, done in zip(p.figures.plots, drawn[4:], strict=False):
        suffix, alt, caption = EXTRA_FIGURES[name]
        if done:
            figs.append(_figure(f"{stem}-{suffix}.png", f"{alt}, {title}", f"{who}: {caption}"))
    return "\n".join(figs)


def draw_plots(result: RunResult, folder: Path, plots: str) -> tuple[dict, dict, str]:
    """Draw the plots of the pairs ``plots`` selects (:func:`plotted`) into ``folder``, the pairs
    numbered in page order. Returns the drawing job and the plots drawn of each drawn pair, by
    ``id(pair)``, and the sentence saying which pairs' plots the page shows."""
    by_case: dict[str, list[PairResult]] = {}
    for p in result.pairs:
        by_case.setdefault(p.case, []).append(p)
    jobs: dict[int, tuple] = {}
    n = 0
    for case in result.cases:
        for p in by_case.get(case.name, []):
            n += 1
            if plotted(p, plots):
                jobs[id(p)] = _plot_job(p, case, folder, n)
    figures = {id(p): p.figures for p in result.pairs}
    drawn = {k: draw_pair(*job) + tuple(
        EXTRA_PLOTS[name](job[0], job[1] / f"{job[2]}-{EXTRA_FIGURES[name][0]}.png", job[3])
        for name in figures[k].plots) for k, job in jobs.items()}
    failed = sum(1 for p in result.pairs
                 if id(p) in jobs and p.status in (compare.DIVERGED, compare.ERROR))
    always = Counter(p.figures.always_plot_words for p in result.pairs
                     if id(p) in jobs and p.status not in (compare.DIVERGED, compare.ERROR))
    return jobs, drawn, plots_line(plots, failed, always)
