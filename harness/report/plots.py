"""Per-timestep divergence plots for index.html (matplotlib, Agg, small PNGs).

Every plot draws the divergence rows of one case x adapter pair as they are (``max_abs``,
``noise_floor``, ``atol`` and the row ``verdict`` from :mod:`harness.compare`); nothing here
decides a verdict. matplotlib is imported lazily so that importing :mod:`harness` stays cheap.

- :func:`error_plot`: the forward outputs (``y`` per timestep, final states ``h_n``/``c_n``);
- :func:`layer_heatmap`: every layer's ``y``, layer x timestep;
- :func:`gradient_plot` (gradient cases): ``dx`` per timestep and the initial-state gradients
  ``dh0``/``dc0``; its rows have no direction (``dx``: both directions add into it);
- :func:`gradient_blocks` (gradient cases): the parameter gradients, layer/direction x block.

:func:`draw_pairs` draws every pair's plots; a large report's go to worker processes side by
side (matplotlib draws in one thread per process, and the plots are most of a full report's
time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.compare import FORWARD

DPI = 80
MIN_PARALLEL = 48  # pairs from which draw_pairs uses worker processes (~1.5 s to start them)
DIRECTION = {0: "fwd", 1: "rev"}
STATE_MARKERS = {"h_n": "o", "c_n": "s"}
INITIAL_MARKERS = {"dh0": "o", "dc0": "s"}
INPUT_GRADIENTS = ("dx", "dh0", "dc0")  # every other gradient row is a parameter block's


def parameter_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of parameter gradients (``dW_i``, ``dbR_f``, ``dWp``, ...)."""
    return rows[~rows["output"].isin(FORWARD + INPUT_GRADIENTS)]


def _figure(width: float, height: float):
    # Figure + FigureCanvasAgg, not pyplot: no global backend state, no GUI, nothing to close.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _plain_log_ticks(axis) -> None:
    """Decades labelled like 1e-07, no minor ticks: mathtext labels cost more than the plot."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=10, numticks=6))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))


def _positive(values: pd.Series | np.ndarray) -> np.ndarray:
    """Float values with zeros (exact agreement) as NaN: a log axis cannot show them."""
    v = np.asarray(values, dtype=float)
    return np.where(v > 0, v, np.nan)


def _log_levels(rows: pd.DataFrame) -> tuple[float, float]:
    """The y range of a log plot: the errors, noise floor and atol of the rows, padded."""
    levels = np.concatenate([_positive(rows["max_abs"]), _positive(rows["noise_floor"]),
                             _positive([rows["atol"].iloc[0]])])
    return np.nanmin(levels) / 4, np.nanmax(levels) * 4


def _tolerance_marks(ax, rows: pd.DataFrame, x_of, lo: float, hi: float) -> tuple[float, float]:
    """Red crosses on the rows beyond tolerance (at ``x_of(t, layer, direction)``), the atol
    line and the log y axis from ``lo`` to ``hi``; returns the rows' (atol, rtol)."""
    bad = rows[rows["verdict"] != "pass"]
    if not bad.empty:
        bx = [x_of(t, la, d)
              for t, la, d in zip(bad["t"], bad["layer"], bad["direction"], strict=True)]
        ax.scatter(bx, _positive(bad["max_abs"]), marker="x", color="red", s=30, zorder=5,
                   label="beyond tolerance")
    atol, rtol = float(rows["atol"].iloc[0]), float(rows["rtol"].iloc[0])
    if atol > 0:
        # The tolerance is atol + rtol*|ref| per element; |ref| is not in the rows, so the
        # line shows atol and the red crosses show the verdicts the rows carry.
        ax.axhline(atol, color="red", ls="--", lw=1, label=f"atol {atol:g}")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    _plain_log_ticks(ax.yaxis)
    return atol, rtol


def error_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs against t, a line per (layer, direction) of ``y``, the final states ``h_n``
    and ``c_n`` as markers at the right edge, the tolerance's ``atol`` and the noise floor.

    Rows whose verdict is DIVERGED get a red cross. Gradient rows are left out (see
    :func:`gradient_plot`). Returns False (and writes nothing) when there is nothing a log axis
    can show: no rows, or every error exactly 0.
    """
    if rows is None or rows.empty:
        return False
    rows = rows[rows["output"].isin(FORWARD)]
    if rows.empty or not (rows["max_abs"] > 0).any():
        return False
    y = rows[rows["output"] == "y"]
    states = rows[rows["output"] != "y"]
    t_max = int(y["t"].max()) if not y.empty else 0
    final = t_max + 1  # the x position of the final states
    slices = sorted({(int(r.layer), int(r.direction)) for r in rows.itertuples()})

    lo, hi = _log_levels(rows)
    fig = _figure(7.2, 2.9)
    ax = fig.add_axes((0.08, 0.16, 0.62, 0.72))
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(slices) <= 10 else "tab20"]
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(slices)}
    # Final states side by side (layer, direction order) so that equal errors stay visible.
    gap = min(0.12, 0.7 / len(slices))
    jitter = {s: (i - (len(slices) - 1) / 2) * gap for i, s in enumerate(slices)}

    # Noise floor: the largest floor among the slices at each step (grey area under it).
    floor_x, floor_v = [], []
    if rows["noise_floor"].notna().any():
        if not y.empty:
            per_t = y.groupby("t")["noise_floor"].max()
            floor_x += [int(t) for t in per_t.index]
            floor_v += list(per_t.values)
        if not states.empty:
            floor_x.append(final)
            floor_v.append(states["noise_floor"].max())
        fv = _positive(floor_v)
        if np.isfinite(fv).any():
            ax.fill_between(floor_x, np.nan_to_num(fv, nan=lo), lo, step="mid", color="0.85",
                            label="noise floor", zorder=0)
    for (layer, d), part in y.groupby(["layer", "direction"]):
        part = part.sort_values("t")
        ax.plot(part["t"].astype(int), _positive(part["max_abs"]), color=colour[(layer, d)],
                lw=1.3, label=f"y L{layer} {DIRECTION.get(d, d)}")
    for name, marker in STATE_MARKERS.items():
        part = states[states["output"] == name]
        if part.empty:
            continue
        keys = [(int(la), int(d)) for la, d in zip(part["layer"], part["direction"], strict=True)]
        ax.scatter([final + jitter[k] for k in keys], _positive(part["max_abs"]), marker=marker,
                   s=22, facecolors="none", edgecolors=[colour[k] for k in keys])
        ax.scatter([], [], marker=marker, facecolors="none", edgecolors="0.3", label=name)
    atol, rtol = _tolerance_marks(
        ax, rows, lambda t, la, d: final + jitter[(int(la), int(d))] if pd.isna(t) else int(t),
        lo, hi)
    ticks = sorted({int(t) for t in y["t"]}) if not y.empty else []
    step = max(1, len(ticks) // 12)
    xt = ticks[::step] + ([final] if not states.empty else [])
    ax.set_xticks(xt, [str(t) for t in ticks[::step]] + (["final"] if not states.empty else []))
    ax.set_xlim(-0.5, final + 0.6)
    ax.set_xlabel("timestep t", fontsize=8)
    ax.set_ylabel("max |adapter − reference|", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", axis="y", lw=0.4, color="0.8")
    fig.text(0.08, 0.93, f"{title}  tolerance: atol {atol:g} + rtol {rtol:g}·|ref|", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    wide = len(labels) > 12  # deep bidirectional stacks: two legend columns, a narrower plot
    if wide:
        ax.set_position((0.08, 0.16, 0.52, 0.72))
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.62 if wide else 0.72, 0.52),
               fontsize=7, frameon=False, ncol=2 if wide else 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return True


def layer_heatmap(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A layer x timestep map of log10(max_abs) of ``y`` for deep stacks: drawn only when the
    adapter returned every layer's ``y`` (rows for more than one layer). Diverging cells get a
    red cross. Returns False when there is nothing to draw."""
    if rows is None or rows.empty:
        return False
    y = rows[rows["output"] == "y"]
    if y["layer"].nunique() < 2 or not (y["max_abs"] > 0).any():
        return False
    grid = y.pivot_table(index=["layer", "direction"], columns="t", values="max_abs", aggfunc="max")
    verdict = y.assign(bad=(y["verdict"] != "pass").astype(float)).pivot_table(
        index=["layer", "direction"], columns="t", values="bad", aggfunc="max")
    values = np.log10(_positive(grid.to_numpy()))
    n_rows, n_t = values.shape
    fig = _figure(7.2, 1.1 + 0.22 * n_rows)
    ax = fig.add_axes((0.1, 0.8 / (1.1 + 0.22 * n_rows), 0.72, 1 - 1.2 / (1.1 + 0.22 * n_rows)))
    masked = np.ma.masked_invalid(values)
    im = ax.imshow(masked, aspect="auto", cmap="viridis", interpolation="nearest")
    bad_r, bad_c = np.nonzero(verdict.to_numpy() > 0)
    if len(bad_r):
        ax.scatter(bad_c, bad_r, marker="x", color="red", s=14, lw=1)
    ax.set_yticks(range(n_rows), [f"L{la} {DIRECTION.get(d, d)}" for la, d in grid.index])
    step = max(1, n_t // 16)
    ax.set_xticks(range(0, n_t, step), [str(int(t)) for t in grid.columns[::step]])
    ax.set_xlabel("timestep t", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9, loc="left")
    cax = fig.add_axes((0.85, 0.8 / (1.1 + 0.22 * n_rows), 0.02, 1 - 1.2 / (1.1 + 0.22 * n_rows)))
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("log10 max_abs", fontsize=7)
    cb.ax.tick_params(labelsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return True


def gradient_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs of ``dx`` against t (one line: every direction adds into dx), the
    initial-state gradients ``dh0``/``dc0`` per layer and direction as markers at the left edge
    (the state before t = 0), the noise floor, ``atol`` and red crosses where a row is beyond
    tolerance. Returns False when there is nothing to draw (no such rows, or every error 0)."""
    if rows is None or rows.empty:
        return False
    g = rows[rows["output"].isin(INPUT_GRADIENTS)]
    if g.empty or not (g["max_abs"] > 0).any():
        return False
    dx = g[g["output"] == "dx"].sort_values("t")
    states = g[g["output"] != "dx"]
    initial = -1  # x position of dh0/dc0
    slices = sorted({(int(la), int(d)) for la, d in zip(states["layer"], states["direction"],
                                                        strict=True)})
    lo, hi = _log_levels(g)
    fig = _figure(7.2, 2.6)
    ax = fig.add_axes((0.08, 0.17, 0.62, 0.7))
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(slices) <= 10 else "tab20"]
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(slices)}
    gap = min(0.12, 0.7 / max(1, len(slices)))
    jitter = {s: (i - (len(slices) - 1) / 2) * gap for i, s in enumerate(slices)}

    if g["noise_floor"].notna().any():
        floor_x = ([initial] if not states.empty else []) + [int(t) for t in dx["t"]]
        floor_v = ([states["noise_floor"].max()] if not states.empty else []) \
            + list(dx["noise_floor"])
        fv = _positive(floor_v)
        if np.isfinite(fv).any():
            ax.fill_between(floor_x, np.nan_to_num(fv, nan=lo), lo, step="mid", color="0.85",
                            label="noise floor", zorder=0)
    if not dx.empty:
        ax.plot(dx["t"].astype(int), _positive(dx["max_abs"]), color="0.15", lw=1.3, label="dx")
    for name, marker in INITIAL_MARKERS.items():
        part = states[states["output"] == name]
        if part.empty:
            continue
        keys = [(int(la), int(d)) for la, d in zip(part["layer"], part["direction"], strict=True)]
        ax.scatter([initial + jitter[k] for k in keys], _positive(part["max_abs"]), marker=marker,
                   s=22, facecolors="none", edgecolors=[colour[k] for k in keys])
        ax.scatter([], [], marker=marker, facecolors="none", edgecolors="0.3", label=name)
    for k in slices:  # legend entries for the layer/direction colours of the markers
        ax.scatter([], [], marker="o", color=colour[k], s=10,
                   label=f"L{k[0]} {DIRECTION.get(k[1], k[1])}")
    atol, rtol = _tolerance_marks(
        ax, g, lambda t, la, d: int(t) if not pd.isna(t) else initial + jitter[(int(la), int(d))],
        lo, hi)
    ticks = [int(t) for t in dx["t"]]
    step = max(1, len(ticks) // 12)
    xt = ([initial] if not states.empty else []) + ticks[::step]
    ax.set_xticks(xt, (["h0/c0"] if not states.empty else []) + [str(t) for t in ticks[::step]])
    ax.set_xlim(initial - 0.6, (max(ticks) if ticks else 0) + 0.5)
    ax.set_xlabel("timestep t (dx) / initial state (dh0, dc0)", fontsize=8)
    ax.set_ylabel("max |adapter − reference|", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="major", axis="y", lw=0.4, color="0.8")
    fig.text(0.08, 0.92, f"{title}  tolerance: atol {atol:g} + rtol {rtol:g}·|ref|", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    wide = len(labels) > 12
    if wide:
        ax.set_position((0.08, 0.17, 0.52, 0.7))
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(0.62 if wide else 0.72, 0.52),
               fontsize=7, frameon=False, ncol=2 if wide else 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return True


def gradient_blocks(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A (layer, direction) x parameter-block map of log10(max_abs) of the parameter gradients
    (``dW_i`` ... ``dWp``, columns in the order of the rows); cells beyond tolerance get a red
    cross, blocks a layer does not have are blank. Returns False when there is nothing to draw."""
    if rows is None or rows.empty:
        return False
    p = parameter_rows(rows)
    if p.empty or not (p["max_abs"] > 0).any():
        return False
    blocks = list(pd.unique(p["output"]))
    grid = p.pivot_table(index=["layer", "direction"], columns="output", values="max_abs",
                         aggfunc="max").reindex(columns=blocks)
    verdict = p.assign(bad=(p["verdict"] != "pass").astype(float)).pivot_table(
        index=["layer", "direction"], columns="output", values="bad", aggfunc="max"
    ).reindex(index=grid.index, columns=blocks)
    values = np.log10(_positive(grid.to_numpy()))
    n_rows, n_cols = values.shape
    height = 1.25 + 0.24 * n_rows  # inches: title, rows, rotated block names
    fig = _figure(7.2, height)
    bottom, top = 0.75 / height, 0.35 / height
    ax = fig.add_axes((0.1, bottom, 0.72, 1 - bottom - top))
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="white")
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap, interpolation="nearest")
    bad_r, bad_c = np.nonzero(np.nan_to_num(verdict.to_numpy()) > 0)
    if len(bad_r):
        ax.scatter(bad_c, bad_r, marker="x", color="red", s=18, lw=1.2)
    ax.set_yticks(range(n_rows), [f"L{la} {DIRECTION.get(d, d)}" for la, d in grid.index])
    ax.set_xticks(range(n_cols), blocks, rotation=60, ha="right", rotation_mode="anchor")
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9, loc="left")
    cax = fig.add_axes((0.85, bottom, 0.02, 1 - bottom - top))
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("log10 max_abs", fontsize=7)
    cb.ax.tick_params(labelsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return True


def draw_pair(rows: pd.DataFrame, folder: Path, stem: str, title: str) -> tuple[bool, ...]:
    """Every plot of one pair's rows into ``folder`` as ``stem*.png``: whether each of
    :func:`error_plot`, :func:`layer_heatmap`, :func:`gradient_plot` and
    :func:`gradient_blocks` wrote its file."""
    return (error_plot(rows, folder / f"{stem}.png", title),
            layer_heatmap(rows, folder / f"{stem}-layers.png", f"{title}: every layer's y"),
            gradient_plot(rows, folder / f"{stem}-grad.png", f"{title}: dx, dh0, dc0"),
            gradient_blocks(rows, folder / f"{stem}-grad-blocks.png",
                            f"{title}: parameter gradients"))


def draw_pairs(jobs: list[tuple[pd.DataFrame, Path, str, str]],
               workers: int = 1) -> list[tuple[bool, ...]]:
    """:func:`draw_pair` of every job (its arguments), results in order. From
    :data:`MIN_PARALLEL` jobs on, in ``workers`` spawned processes; here when there is one, or
    when the processes cannot be started. A spawned process imports the caller's ``__main__``:
    a script calling this with workers must guard its top level with ``if __name__ ==
    "__main__"`` (``python -m harness`` and the console script are)."""
    if workers > 1 and len(jobs) >= MIN_PARALLEL:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        try:
            with ProcessPoolExecutor(min(workers, len(jobs)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                return list(pool.map(draw_pair, *zip(*jobs, strict=True), chunksize=4))
        except (BrokenProcessPool, OSError):
            pass  # e.g. no semaphores in a sandbox: draw them here
    return [draw_pair(*job) for job in jobs]
