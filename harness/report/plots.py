"""Per-timestep divergence plots for index.html: plain matplotlib, one PNG a plot.

Every plot draws the divergence rows of one case x adapter pair as they are (``max_abs``,
``noise_floor``, ``atol`` and the row ``verdict`` from :mod:`harness.compare`); nothing here
decides a verdict. matplotlib is imported lazily so that importing :mod:`harness` stays cheap,
and each plot is a :class:`matplotlib.figure.Figure` of its own, saved through the Agg canvas:
no pyplot, so no global figure state and no GUI backend.

- :func:`error_plot`: the forward outputs (``y`` per timestep, final states ``h_n``/``c_n``);
- :func:`layer_heatmap`: every layer's ``y``, layer x timestep;
- :func:`gradient_plot` (gradient cases): ``dx`` per timestep and the initial-state gradients
  ``dh0``/``dc0``; its rows have no direction (``dx``: both directions add into it);
- :func:`gradient_blocks` (gradient cases): the parameter gradients, layer/direction x block.

:func:`draw_pair` draws the four of one pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from harness.compare import FORWARD, PASS

DPI = 100
WIDTH = 9.0  # inches: 900 px, the width of index.html's column
FONT = 10  # points (14 px at DPI 100): ticks, labels and legends; titles 11
LEGEND_ROWS = 17  # legend entries a column before the legend takes another column
LEGEND_COLUMN = 1.7  # inches: a legend column at FONT ("beyond tolerance", "c_n L1 rev")
DIRECTION = {0: "fwd", 1: "rev"}
STATE_MARKERS = {"h_n": "o", "c_n": "s"}
INITIAL_MARKERS = {"dh0": "o", "dc0": "s"}
INPUT_GRADIENTS = ("dx", "dh0", "dc0")  # every other gradient row is a parameter block's


def parameter_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of parameter gradients (``dW_i``, ``dbR_f``, ``dWp``, ...)."""
    return rows[~rows["output"].isin(FORWARD + INPUT_GRADIENTS)]


def _figure(height: float, right: float, top: float, bottom: float):
    """A Figure of :data:`WIDTH` x ``height`` inches with one Axes, ``right``, ``top`` and
    ``bottom`` inches from its edges (room for the legend or colour bar, the title and the
    x labels): fixed margins, since constrained layout measured the text again and again
    (half of a plot's time)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH, height), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    fig.subplots_adjust(left=0.85 / WIDTH, right=1 - right / WIDTH, top=1 - top / height,
                        bottom=bottom / height)
    ax.tick_params(labelsize=FONT)
    return fig, ax


def _save(fig, path: Path) -> None:
    from harness.safe_files import created

    with created(path, path.parent) as f:  # plots/ of a report being written: no link
        fig.savefig(f, dpi=DPI, format="png")


def _name(layer: int, direction: int) -> str:
    return f"L{layer} {DIRECTION.get(direction, direction)}"


def _bad(rows: pd.DataFrame) -> pd.Series:
    """The rows whose verdict is not pass (a missing verdict included)."""
    return (rows["verdict"] != PASS).fillna(True).astype(bool)


def _slices(rows: pd.DataFrame) -> list[tuple[int, int]]:
    """The rows' (layer, direction) pairs, sorted (rows without one left out)."""
    keys = rows[["layer", "direction"]].dropna().drop_duplicates()
    return sorted((int(la), int(d)) for la, d in keys.itertuples(index=False))


def _colours(slices: list[tuple[int, int]]) -> dict[tuple[int, int], tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(slices) <= 10 else "tab20"]
    return {s: cmap(i % cmap.N) for i, s in enumerate(slices)}


def _jitter(slices: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """x offsets of the (layer, direction) slices' markers side by side, so that equal
    errors stay visible."""
    gap = min(0.12, 0.7 / max(1, len(slices)))
    return {s: (i - (len(slices) - 1) / 2) * gap for i, s in enumerate(slices)}


def _positive(values: pd.Series | np.ndarray) -> np.ndarray:
    """Float values with zeros (exact agreement) as NaN: a log axis cannot show them."""
    v = np.asarray(values, dtype=float)
    return np.where(v > 0, v, np.nan)


def _log_levels(rows: pd.DataFrame) -> tuple[float, float]:
    """The y range of a log plot: the errors, noise floor and atol of the rows, padded."""
    levels = np.concatenate([_positive(rows["max_abs"]), _positive(rows["noise_floor"]),
                             _positive(rows["atol"].iloc[:1])])
    return np.nanmin(levels) / 4, np.nanmax(levels) * 4


def _noise_floor(ax, x: list[int], values: list[float], lo: float) -> None:
    """The grey area under the noise floor (NaN: none at that step)."""
    fv = _positive(values)
    if np.isfinite(fv).any():
        ax.fill_between(x, np.nan_to_num(fv, nan=lo), lo, step="mid", color="0.85", zorder=0,
                        label="noise floor")


def _markers(ax, rows: pd.DataFrame, markers: dict[str, str], x: float,
             colour: dict, jitter: dict) -> None:
    """Hollow markers of the per-(layer, direction) outputs ``markers`` at ``x`` (each slice
    beside the others), one legend entry each naming its output, layer and direction."""
    for name, marker in markers.items():
        part = rows[rows["output"] == name]
        for (la, d), cell in part.groupby(["layer", "direction"], sort=True):
            key = (int(la), int(d))
            ax.scatter(np.full(len(cell), x + jitter[key]), _positive(cell["max_abs"]),
                       marker=marker, s=36, facecolors="none", edgecolors=[colour[key]],
                       linewidths=1.2, zorder=3, label=f"{name} {_name(*key)}")


def _tolerance_marks(ax, rows: pd.DataFrame, x_of, lo: float, hi: float) -> tuple[float, float]:
    """Red crosses on the rows beyond tolerance (at ``x_of(t, layer, direction)``), the atol
    line and the log y axis from ``lo`` to ``hi``; returns the rows' (atol, rtol)."""
    bad = rows[_bad(rows)]
    if len(bad):
        x = [x_of(t, la, d) for t, la, d in zip(bad["t"], bad["layer"], bad["direction"],
                                                 strict=True)]
        ax.scatter(x, _positive(bad["max_abs"]), marker="x", s=40, color="red", linewidths=1.5,
                   zorder=5, label="beyond tolerance")
    atol, rtol = float(rows["atol"].iloc[0]), float(rows["rtol"].iloc[0])
    if atol > 0:
        # The tolerance is atol + rtol*|ref| per element; |ref| is not in the rows, so the
        # line shows atol and the red crosses show the verdicts the rows carry.
        ax.axhline(atol, color="red", ls="--", lw=1, label=f"atol {atol:g}")
    ax.set_ylim(lo, hi)
    return atol, rtol


def _log_figure(entries: int, xlabel: str):
    """The figure of :func:`error_plot` and :func:`gradient_plot`: tall enough for a legend
    of ``entries`` rows beside the plot, in columns of :data:`LEGEND_ROWS`."""
    ncol = max(1, math.ceil(entries / LEGEND_ROWS))
    rows = math.ceil(entries / ncol)
    height = max(3.4, 1.3 + 0.25 * rows)
    fig, ax = _figure(height, 0.35 + LEGEND_COLUMN * ncol, 0.6, 0.6)
    ax.set_xlabel(xlabel, fontsize=FONT)
    ax.set_ylabel("max |adapter − reference|", fontsize=FONT)
    ax.grid(True, which="major", axis="y", lw=0.5, color="0.85")
    return fig, ax, ncol


def _finish_log(fig, ax, ncol: int, title: str, atol: float, rtol: float, path: Path) -> None:
    ax.set_yscale("log")
    ax.minorticks_off()  # labelled minor ticks on a log axis cost more than the plot
    ax.set_title(f"{title}\ntolerance: atol {atol:g} + rtol {rtol:g}·|ref|", loc="left",
                 fontsize=FONT + 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncols=ncol, fontsize=FONT,
              frameon=False)
    _save(fig, path)


def _steps(ticks: list[int]) -> list[int]:
    """At most about 12 of the timesteps as tick positions."""
    return ticks[::max(1, len(ticks) // 12)]


def error_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs against t, a line per (layer, direction) of ``y``, the final states ``h_n``
    and ``c_n`` as markers at the right edge (a legend entry each: output, layer, direction),
    the tolerance's ``atol`` and the noise floor.

    Rows whose verdict is not pass get a red cross. Gradient rows are left out (see
    :func:`gradient_plot`). Returns False (and writes nothing) when there is nothing a log axis
    can show: no rows, or every error exactly 0.
    """
    if rows is None or rows.empty:
        return False
    rows = rows[rows["output"].isin(FORWARD)]
    if rows.empty or not (rows["max_abs"] > 0).any():
        return False
    is_y = rows["output"] == "y"
    y, states = rows[is_y], rows[~is_y]
    final = (int(y["t"].max()) if len(y) else 0) + 1  # the x position of the final states
    slices = _slices(rows)
    colour, jitter = _colours(slices), _jitter(slices)
    lo, hi = _log_levels(rows)
    lines = _slices(y)
    entries = (len(lines) + len(_slices(states)) * states["output"].nunique()
               + 3)  # noise floor, beyond tolerance, atol
    fig, ax, ncol = _log_figure(entries, "timestep t")
    if rows["noise_floor"].notna().any():
        # the largest floor among the slices at each step (grey area under it)
        floor = y.groupby("t")["noise_floor"].max()
        x, v = [int(t) for t in floor.index], list(floor)
        if len(states):
            x.append(final)
            v.append(states["noise_floor"].max())
        _noise_floor(ax, x, v, lo)
    for (la, d), part in y.groupby(["layer", "direction"], sort=True):
        part = part.sort_values("t", kind="stable")
        key = (int(la), int(d))
        ax.semilogy(part["t"].astype(int), _positive(part["max_abs"]), color=colour[key],
                    lw=1.3, label=f"y {_name(*key)}")
    _markers(ax, states, STATE_MARKERS, final, colour, jitter)
    atol, rtol = _tolerance_marks(
        ax, rows, lambda t, la, d: final + jitter[(int(la), int(d))] if pd.isna(t) else int(t),
        lo, hi)
    ticks = _steps(sorted({int(t) for t in y["t"]}))
    ax.set_xticks(ticks + ([final] if len(states) else []),
                  [str(t) for t in ticks] + (["final"] if len(states) else []))
    ax.set_xlim(-0.5, final + 0.6)
    _finish_log(fig, ax, ncol, title, atol, rtol, path)
    return True


def _grid(rows: pd.DataFrame, columns: str, order: list | None = None
          ) -> tuple[list[tuple[int, int]], list, np.ndarray, np.ndarray]:
    """The (layer, direction) x ``columns`` table of the rows' largest max_abs (NaN where
    none) and whether a cell holds a row beyond tolerance: the sorted rows and columns
    (``order``: these columns, in this order)."""
    table = rows.assign(bad=_bad(rows).astype(float)).pivot_table(
        index=["layer", "direction"], columns=columns, values=["max_abs", "bad"],
        aggfunc="max", observed=True)
    values = table["max_abs"]
    cols = list(values.columns) if order is None else order
    values = values.reindex(columns=cols)
    bad = table["bad"].reindex(index=values.index, columns=cols)
    index = [(int(la), int(d)) for la, d in values.index]
    return index, cols, values.to_numpy(dtype=float), bad.fillna(0).to_numpy(dtype=float) > 0


def _heatmap(values: np.ndarray, bad: np.ndarray, index: list[tuple[int, int]], height: float,
             bottom: float, title: str, cmap):
    """A map of log10(values) with red crosses on ``bad`` and its colour bar; returns the
    Figure and Axes, for the caller to label the columns."""
    fig, ax = _figure(height, 1.0, 0.35, bottom)  # right: the colour bar's labels
    image = ax.imshow(np.ma.masked_invalid(np.log10(_positive(values))), aspect="auto",
                      cmap=cmap, interpolation="nearest")
    rows, cols = np.nonzero(bad)
    if len(rows):
        ax.scatter(cols, rows, marker="x", s=40, color="red", linewidths=1.5)
    n_rows, n_cols = values.shape
    ax.set_yticks(range(n_rows), [_name(*k) for k in index])
    ax.set_xlim(-0.5, n_cols - 0.5)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_title(title, loc="left", fontsize=FONT + 1)
    # a bar 0.15 inch wide, as high as the map
    bar = fig.colorbar(image, ax=ax, pad=0.015, fraction=0.025,
                       aspect=(height - 0.35 - bottom) / 0.15)
    bar.set_label("log10 max_abs", fontsize=FONT)
    bar.ax.tick_params(labelsize=FONT)
    return fig, ax


def layer_heatmap(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A layer x timestep map of log10(max_abs) of ``y`` for deep stacks: drawn only when the
    adapter returned every layer's ``y`` (rows for more than one layer). Cells beyond
    tolerance get a red cross. Returns False when there is nothing to draw."""
    if rows is None or rows.empty:
        return False
    y = rows[rows["output"] == "y"]
    if y["layer"].dropna().nunique() < 2 or not (y["max_abs"] > 0).any():
        return False
    index, steps, values, bad = _grid(y, "t")
    fig, ax = _heatmap(values, bad, index, 1.3 + 0.3 * len(index), 0.6, title,
                       "viridis")
    at = range(0, len(steps), max(1, len(steps) // 16))
    ax.set_xticks(at, [str(int(steps[i])) for i in at])
    ax.set_xlabel("timestep t", fontsize=FONT)
    _save(fig, path)
    return True


def gradient_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs of ``dx`` against t (one line: every direction adds into dx), the
    initial-state gradients ``dh0``/``dc0`` per layer and direction as markers at the left edge
    (the state before t = 0; a legend entry each), the noise floor, ``atol`` and red crosses
    where a row is beyond tolerance. Returns False when there is nothing to draw (no such
    rows, or every error 0)."""
    if rows is None or rows.empty:
        return False
    g = rows[rows["output"].isin(INPUT_GRADIENTS)]
    if g.empty or not (g["max_abs"] > 0).any():
        return False
    dx = g[g["output"] == "dx"].sort_values("t", kind="stable")
    states = g[g["output"] != "dx"]
    initial = -1  # x position of dh0/dc0
    slices = _slices(states)
    colour, jitter = _colours(slices), _jitter(slices)
    lo, hi = _log_levels(g)
    entries = 1 + len(slices) * states["output"].nunique() + 3
    fig, ax, ncol = _log_figure(entries, "timestep t (dx) / initial state (dh0, dc0)")
    if g["noise_floor"].notna().any():
        x = ([initial] if len(states) else []) + [int(t) for t in dx["t"]]
        v = ([states["noise_floor"].max()] if len(states) else []) + list(dx["noise_floor"])
        _noise_floor(ax, x, v, lo)
    if len(dx):
        ax.semilogy(dx["t"].astype(int), _positive(dx["max_abs"]), color="0.15", lw=1.3,
                    label="dx")
    _markers(ax, states, INITIAL_MARKERS, initial, colour, jitter)
    atol, rtol = _tolerance_marks(
        ax, g, lambda t, la, d: int(t) if not pd.isna(t) else initial + jitter[
            (int(la), int(d))], lo, hi)
    ticks = [int(t) for t in dx["t"]]
    shown = _steps(ticks)
    ax.set_xticks(([initial] if len(states) else []) + shown,
                  (["h0/c0"] if len(states) else []) + [str(t) for t in shown])
    ax.set_xlim(initial - 0.6, (max(ticks) if ticks else 0) + 0.5)
    _finish_log(fig, ax, ncol, title, atol, rtol, path)
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
    from matplotlib import colormaps

    blocks = list(dict.fromkeys(p["output"]))  # in the order of the rows
    index, _, values, bad = _grid(p, "output", blocks)
    cmap = colormaps["viridis"].with_extremes(bad="white")
    fig, ax = _heatmap(values, bad, index, 1.4 + 0.3 * len(index), 0.8, title, cmap)
    ax.set_xticks(range(len(blocks)), blocks, rotation=60, ha="right", rotation_mode="anchor")
    _save(fig, path)
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


def cost_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A quantized pair's cost per timestep (:mod:`harness.quantization`): the SQNR (dB) of
    ``y`` against the float64 reference, a line per (layer, direction), and its RMSE in output
    steps on a second axis. False (nothing written) where no y row has a cost."""
    if "sqnr_db" not in rows.columns or not rows["sqnr_db"].notna().any():
        return False
    y = rows[(rows["output"] == "y") & rows["sqnr_db"].notna()]
    fig, ax = _figure(3.4, 0.35 + LEGEND_COLUMN + 0.6, 0.6, 0.6)
    slices = _slices(y)
    colour = _colours(slices)
    right = ax.twinx()
    right.tick_params(labelsize=FONT)
    for (la, d), part in y.groupby(["layer", "direction"], sort=True):
        part = part.sort_values("t", kind="stable")
        key = (int(la), int(d))
        t = part["t"].astype(int)
        ax.plot(t, np.minimum(part["sqnr_db"].astype(float), 200.0), color=colour[key], lw=1.3,
                label=f"SQNR y {_name(*key)}")
        right.plot(t, part["rmse_steps"].astype(float), color=colour[key], lw=1, ls=":",
                   label=f"RMSE/step y {_name(*key)}")
    ax.set_xlabel("timestep t", fontsize=FONT)
    ax.set_ylabel("SQNR (dB) against float64", fontsize=FONT)
    right.set_ylabel("RMSE / output step (dotted)", fontsize=FONT)
    ax.grid(True, axis="y", lw=0.5, color="0.85")
    ax.set_title(f"{title}\nwhat quantization costs, per timestep", loc="left",
                 fontsize=FONT + 1)
    handles = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left",
              bbox_to_anchor=(1.12, 1.0), fontsize=FONT, frameon=False)
    _save(fig, path)
    return True


EXTRA_PLOTS: dict[str, Callable[[pd.DataFrame, Path, str], bool]] = {"cost": cost_plot}
"""The plots a judge's figures name (:attr:`harness.judges.Figures.plots`), each drawn from
the pair's free-running rows; True where written."""
