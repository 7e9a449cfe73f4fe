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
time). What keeps a plot cheap (``benchmarks/bench_plots.py`` measures it; the pixels are
those of the plain matplotlib calls, which tests check): a Figure per plot kind and size is
made once per thread and reused (:class:`_Frame`), the rows are read into NumPy arrays once per
pair (:class:`_Rows`), markers and lines are added without scatter's and plot's argument
parsing, the legends are a few plain artists laid out as matplotlib's legend lays out its own
(:meth:`_Frame.legend`), and the PNG is written with zlib level 1 (:func:`_write_png`). Text
is what is left: matplotlib 3.11 renders every glyph from Python, about half of each plot.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


class _Rows:
    """The columns the plots read, as NumPy arrays: masks and loops over these cost a fraction
    of pandas indexing, grouping and pivoting (which took a tenth of a plot's time).
    ``layer``, ``direction`` and ``t`` are floats (NaN: missing); ``bad``: the verdict is not
    pass."""

    __slots__ = ("output", "layer", "direction", "t", "max_abs", "noise_floor", "bad", "atol",
                 "rtol")

    def __init__(self, rows: pd.DataFrame | None = None, **columns: np.ndarray):
        if rows is not None:
            columns = {
                "output": rows["output"].to_numpy(dtype=object),
                "bad": (rows["verdict"] != "pass").to_numpy(dtype=bool, na_value=True),
                **{k: rows[k].to_numpy(dtype=float, na_value=np.nan)
                   for k in ("layer", "direction", "t", "max_abs", "noise_floor", "atol",
                             "rtol")}}
        for k, v in columns.items():
            setattr(self, k, v)

    def __len__(self) -> int:
        return len(self.output)

    def __getitem__(self, mask: np.ndarray) -> _Rows:
        return _Rows(**{k: getattr(self, k)[mask] for k in self.__slots__})

    def outputs(self, names) -> np.ndarray:
        """The mask of the rows of these outputs."""
        return np.isin(self.output, list(names))

    def slices(self) -> list[tuple[int, int]]:
        """The rows' (layer, direction) pairs, sorted."""
        return sorted({(int(la), int(d)) for la, d in zip(self.layer, self.direction,
                                                          strict=True)})


def _rows(rows: pd.DataFrame | _Rows | None) -> _Rows | None:
    """The rows as :class:`_Rows` (as they are when they already are), None when there are
    none."""
    if rows is None or isinstance(rows, _Rows):
        return rows
    return _Rows(rows) if not rows.empty else None


def _nanmax(values: np.ndarray) -> float:
    """The largest value that is not NaN (pandas' ``max``), NaN when there is none."""
    values = values[~np.isnan(values)]
    return float(values.max()) if len(values) else float("nan")


def _pivot(rows: _Rows, columns: np.ndarray, values: np.ndarray,
           index: list[tuple[int, int]] | None = None, cols: list | None = None
           ) -> tuple[list[tuple[int, int]], list, np.ndarray]:
    """``pivot_table(index=["layer", "direction"], columns=..., values=..., aggfunc="max")``:
    the sorted (layer, direction) rows and sorted columns of the rows with no key missing
    and not every value NaN, the largest value of each cell (NaN where none); ``index`` and
    ``cols`` given: those rows and columns instead (``reindex``)."""
    cells: dict[tuple, float] = {}
    for la, d, c, v in zip(rows.layer, rows.direction, columns, values, strict=True):
        if np.isnan(la) or np.isnan(d) or pd.isna(c) or np.isnan(v):
            continue
        key = (int(la), int(d), c)
        cells[key] = max(cells.get(key, v), v)
    index = sorted({k[:2] for k in cells}) if index is None else index
    cols = sorted({k[2] for k in cells}) if cols is None else cols
    table = np.full((len(index), len(cols)), np.nan)
    at_row = {k: i for i, k in enumerate(index)}
    at_col = {k: i for i, k in enumerate(cols)}
    for (la, d, c), v in cells.items():
        if (la, d) in at_row and c in at_col:
            table[at_row[(la, d)], at_col[c]] = v
    return index, cols, table


class _Entry:
    """One row of a legend: ``kind`` "patch" (a filled box), "line" or "marker" (scatter's
    marker of area ``size``), drawn with ``style``."""

    __slots__ = ("label", "kind", "style")

    def __init__(self, label: str, kind: str, **style):
        self.label, self.kind, self.style = label, kind, style


FONT_PT = 7  # tick labels and legends
POINT = DPI / 72  # pixels per point


class _Frame:
    """A Figure, its Axes and what every plot of one kind and size sets the same way (labels,
    log axis, grid, colour bar), kept for the next plot of that kind and size in this thread:
    a new Figure costs its axes' tick and text machinery again (most of a small plot's time),
    and a reused canvas keeps its renderer's text-metric cache. Each plot sets everything else
    (its artists, ticks, limits, title, legend) and :meth:`clear` removes what it added, so
    that a PNG does not depend on what was drawn before it (tests compare the bytes)."""

    def __init__(self, width: float, height: float, axes: tuple[float, ...],
                 colorbar: tuple[float, ...] | None = None):
        # Figure + FigureCanvasAgg, not pyplot: no global backend state, no GUI, nothing to
        # close.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=(width, height), dpi=DPI)
        FigureCanvasAgg(self.fig)
        self.ax = self.fig.add_axes(axes)
        self.cax = self.fig.add_axes(colorbar) if colorbar else None
        self.colorbar = None  # made from the first plot's image, then updated (update_normal)
        self.title = None
        self._lp_ascent: float | None = None
        self._extents: dict = {}  # legend label: its text's box about its baseline at (0, 0)
        self._labels: list = []  # the legend's texts, hidden when not used

    def colour_bar(self, image) -> None:
        """The colour bar of ``image`` (log10 max_abs) in :attr:`cax`."""
        if self.colorbar is None:
            self.colorbar = self.fig.colorbar(image, cax=self.cax)
            self.colorbar.set_label("log10 max_abs", fontsize=FONT_PT)
            self.colorbar.ax.tick_params(labelsize=FONT_PT)
        else:
            image.autoscale_None()
            self.colorbar.update_normal(image)

    def legend(self, entries: list[_Entry], x: float, y: float, ncol: int) -> None:
        """``entries`` in ``ncol`` columns, their left edge at figure fraction ``x`` and centred
        on ``y``, drawn as a few plain artists where ``fig.legend(loc="center left",
        bbox_to_anchor=(x, y), frameon=False, fontsize=7)`` would put its own (its default
        spacings: handles 2 x 0.7 font sizes and 0.8 from their text, rows 0.5 apart, columns
        2, borders 0.5 + 0.4, each row as high as its text reaches; the same pixels): a
        Legend lays its boxes out again and again while it draws, a quarter of a plot's time.
        """
        from matplotlib.font_manager import FontProperties
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
        from matplotlib.transforms import IdentityTransform

        fig, pixels = self.fig, IdentityTransform()
        renderer = fig.canvas.get_renderer()
        size = FONT_PT * POINT  # the font size in pixels: the unit of every spacing
        if self._lp_ascent is None:  # how high a row's text reaches at least above its baseline
            _, h, d = renderer.get_text_width_height_descent(
                "lp", FontProperties(size=FONT_PT), ismath=False)
            self._lp_ascent = h - d
        # each row's text (kept from plot to plot, at 0, 0 until placed) and how far the row
        # reaches below and above its baseline: the text's extent or the handle's box (0 to
        # 0.7 font sizes)
        while len(self._labels) < len(entries):
            self._labels.append(fig.text(0, 0, "", transform=pixels, fontsize=FONT_PT,
                                         va="baseline", ha="left", visible=False))
        texts = self._labels[:len(entries)]
        for e, t in zip(entries, texts, strict=True):
            t.set_text(e.label)
            t.set_position((0, 0))
            t.set_visible(True)
            if e.label not in self._extents:  # the labels repeat from plot to plot
                self._extents[e.label] = t.get_window_extent(renderer)
        boxes = [self._extents[e.label] for e in entries]
        below = [min(0.0, b.y0) for b in boxes]
        above = [max(0.7 * size, self._lp_ascent, b.y1) for b in boxes]
        ends = np.cumsum([len(entries) // ncol + (c < len(entries) % ncol) for c in range(ncol)])
        columns = [range(i0, i1) for i0, i1 in zip([0, *ends[:-1]], ends, strict=True) if i1 > i0]
        # each row's baseline relative to the first row's (the columns share that one)
        baseline, top, bottom = {}, 0.0, 0.0
        for column in columns:
            at = 0.0
            for i in column:
                if i > column[0]:
                    at += below[i - 1] - 0.5 * size - above[i]
                baseline[i] = at
            top, bottom = max(top, above[column[0]]), min(bottom, at + below[column[-1]])
        first = y * fig.bbox.height - (top + bottom) / 2
        left = x * fig.bbox.width + 0.9 * size
        for column in columns:
            for i in column:
                e, b = entries[i], first + baseline[i]
                if e.kind == "patch":
                    handle = Rectangle((left, b), 2 * size, 0.7 * size, **e.style)
                elif e.kind == "line":
                    handle = Line2D([left, left + size, left + 2 * size], [b + 0.35 * size] * 3,
                                    **e.style)
                else:  # scatter's marker, as the legend draws it for a PathCollection
                    handle = _markers(**e.style, offsets=[(left + size, b + 0.2625 * size)],
                                      offset_transform=pixels)
                handle.set_transform(pixels)
                fig.add_artist(handle)
                texts[i].set_position((left + 2.8 * size, b))
            left += 2.8 * size + max(boxes[i].width for i in column) + 2 * size

    def clear(self) -> None:
        """Remove the plot's artists and legend (the colour bar's are replaced by the next
        :meth:`colour_bar`)."""
        ax, fig = self.ax, self.fig
        kept = {id(self.title), *map(id, self._labels)}
        for artist in (*ax.lines, *ax.collections, *ax.images, *ax.patches, *ax.texts,
                       *ax.artists, *fig.artists, *fig.legends,
                       *(t for t in fig.texts if id(t) not in kept)):
            artist.remove()
        for text in self._labels:
            text.set_visible(False)
        ax.set_prop_cycle(None)

    def save(self, path: Path) -> None:
        """Draw the figure and write its pixels to ``path`` (:func:`_write_png`)."""
        self.fig.canvas.draw()
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_png(path, np.asarray(self.fig.canvas.buffer_rgba()))


def _write_png(path: Path, rgba: np.ndarray) -> None:
    """An RGBA image as a PNG: rows unfiltered, zlib level 1, :data:`DPI` (pHYs) and no other
    metadata (nothing that changes from run to run). The pixels ``savefig`` writes, about as
    small, in less than half the time (Pillow tries five filters on every row, and its level
    6 compresses these plots hardly better)."""
    height, width, _ = rgba.shape
    per_metre = int(DPI / 0.0254 + 0.5)
    rows = np.zeros((height, 1 + 4 * width), np.uint8)  # each row: filter type 0, its bytes
    rows[:, 1:] = rgba.reshape(height, 4 * width)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    path.write_bytes(b"\x89PNG\r\n\x1a\n"
                     + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
                     + chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))
                     + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)) + chunk(b"IEND", b""))


_LOCAL = threading.local()  # this thread's frames: matplotlib artists are not thread-safe
MAX_FRAMES = 12  # kinds x sizes kept per thread (the heatmaps' heights vary with the rows)


@contextmanager
def _frame(key: tuple, make: Callable[[], _Frame]) -> Iterator[_Frame]:
    """The kept :class:`_Frame` of ``key`` (``make()`` the first time), cleared after the plot;
    one that raised is dropped, not kept."""
    frames: dict[tuple, _Frame] = _LOCAL.__dict__.setdefault("frames", {})
    frame = frames.pop(key, None) or make()
    yield frame  # an exception leaves it out of frames
    frame.clear()
    frames[key] = frame  # the most recently used last
    while len(frames) > MAX_FRAMES:
        del frames[next(iter(frames))]


def _plain_log_ticks(axis) -> None:
    """Decades labelled like 1e-07, no minor ticks: mathtext labels cost more than the plot."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(base=10, numticks=6))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}"))


def _log_axes(height: float, axes: tuple[float, ...], xlabel: str, title_y: float) -> _Frame:
    """The frame of :func:`error_plot` and :func:`gradient_plot`: log y axis, labels, grid."""
    frame = _Frame(7.2, height, axes)
    ax = frame.ax
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("max |adapter − reference|", fontsize=8)
    ax.tick_params(labelsize=FONT_PT)
    ax.grid(True, which="major", axis="y", lw=0.4, color="0.8")
    frame.title = frame.fig.text(0.08, title_y, "", fontsize=9)
    return frame


def _heatmap_axes(height: float, bottom: float, span: float, xlabel: str = "") -> _Frame:
    """The frame of :func:`layer_heatmap` and :func:`gradient_blocks`: the map and its colour
    bar (``bottom`` and ``span``: figure fractions), limits set by each plot."""
    frame = _Frame(7.2, height, (0.1, bottom, 0.72, span), (0.85, bottom, 0.02, span))
    ax = frame.ax
    ax.set_autoscale_on(False)
    ax.tick_params(labelsize=FONT_PT)
    # An axis label is placed clear of the tick labels (their boxes measured again) on every
    # draw unless placed by hand: the labels these maps have not are placed at 0, 0.
    ax.yaxis.set_label_coords(0, 0)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)
    else:
        ax.xaxis.set_label_coords(0, 0)
    return frame


def _markers(marker: str, size: float, offsets, offset_transform, **style):
    """The PathCollection ``scatter`` makes of points at ``offsets`` (``size``: the marker's
    area in points²)."""
    from matplotlib.collections import PathCollection
    from matplotlib.markers import MarkerStyle
    from matplotlib.transforms import IdentityTransform

    shape = MarkerStyle(marker)
    points = PathCollection([shape.get_path().transformed(shape.get_transform())],
                            sizes=[size], offsets=offsets, offset_transform=offset_transform,
                            **style)
    points.set_transform(IdentityTransform())
    return points


def _scatter(ax, x, y, marker: str, size: float, **style) -> None:
    """``ax.scatter(x, y, marker=marker, s=size, ...)`` without parsing its arguments (which
    took longer than drawing the points). Points with a NaN coordinate are left out, as
    scatter leaves them out, with their colour when there is one a point. ``style`` holds
    the colours scatter would derive: ``facecolors=c, edgecolors="face"`` and ``linewidths``
    (scatter's default 1.5) for an unfilled marker (``x``) of colour c; a filled one's line
    width is 1 unless given."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    edges = style.get("edgecolors")
    if edges is not None and not isinstance(edges, str):
        style["edgecolors"] = [c for c, k in zip(edges, keep, strict=True) if k]
    # the view limits are set by hand: no data limits to update (autolim)
    ax.add_collection(_markers(marker, size, np.column_stack([x[keep], y[keep]]), ax.transData,
                               **style), autolim=False)


def _line(ax, x, y, **style) -> None:
    """``ax.plot(x, y, **style)`` without parsing its arguments."""
    from matplotlib.lines import Line2D

    ax.add_line(Line2D(x, y, **style))


def _hline(ax, y: float, **style) -> None:
    """``ax.axhline(y, **style)``: a line across the axes at ``y``, without its checks."""
    from matplotlib.lines import Line2D

    ax.add_line(Line2D([0, 1], [y, y], transform=ax.get_yaxis_transform(which="grid"), **style))


def _positive(values: pd.Series | np.ndarray) -> np.ndarray:
    """Float values with zeros (exact agreement) as NaN: a log axis cannot show them."""
    v = np.asarray(values, dtype=float)
    return np.where(v > 0, v, np.nan)


def _log_levels(rows: _Rows) -> tuple[float, float]:
    """The y range of a log plot: the errors, noise floor and atol of the rows, padded."""
    levels = np.concatenate([_positive(rows.max_abs), _positive(rows.noise_floor),
                             _positive(rows.atol[:1])])
    return np.nanmin(levels) / 4, np.nanmax(levels) * 4


def _noise_floor(ax, x: list[int], values: list[float], lo: float) -> list[_Entry]:
    """The grey area under the noise floor (NaN: none at that step); its legend entry."""
    fv = _positive(values)
    if not np.isfinite(fv).any():
        return []
    ax.fill_between(x, np.nan_to_num(fv, nan=lo), lo, step="mid", color="0.85", zorder=0)
    # the legend's box: a PolyCollection's colour on both sides, patch.linewidth (1)
    return [_Entry("noise floor", "patch", facecolor="0.85", edgecolor="0.85", lw=1.0)]


def _tolerance_marks(ax, rows: _Rows, x_of, lo: float, hi: float
                     ) -> tuple[float, float, list[_Entry]]:
    """Red crosses on the rows beyond tolerance (at ``x_of(t, layer, direction)``), the atol
    line and the log y axis from ``lo`` to ``hi``; returns the rows' (atol, rtol) and the
    legend entries."""
    entries = []
    bad = rows[rows.bad]
    if len(bad):
        bx = [x_of(t, la, d) for t, la, d in zip(bad.t, bad.layer, bad.direction, strict=True)]
        _scatter(ax, bx, _positive(bad.max_abs), "x", 30, facecolors="red", edgecolors="face",
                 linewidths=1.5, zorder=5)
        # scatter's unfilled marker: lines.linewidth (1.5), edges the face colour
        entries.append(_Entry("beyond tolerance", "marker", marker="x", size=30,
                              facecolors="red", edgecolors="face", linewidths=1.5))
    atol, rtol = float(rows.atol[0]), float(rows.rtol[0])
    if atol > 0:
        # The tolerance is atol + rtol*|ref| per element; |ref| is not in the rows, so the
        # line shows atol and the red crosses show the verdicts the rows carry.
        _hline(ax, atol, color="red", ls="--", lw=1)
        entries.append(_Entry(f"atol {atol:g}", "line", color="red", ls="--", lw=1))
    ax.set_ylim(lo, hi)
    return atol, rtol, entries


def _hollow(name: str, marker: str) -> _Entry:
    """The legend entry of an output drawn as hollow markers (scatter's default area 36, a
    filled marker's patch.linewidth 1)."""
    return _Entry(name, "marker", marker=marker, size=36, facecolors="none", edgecolors="0.3",
                  linewidths=1.0)


def _legend(frame: _Frame, entries: list[_Entry], axes: tuple[float, ...],
            narrow: tuple[float, ...]) -> None:
    """The legend right of the plot; past 12 entries (deep bidirectional stacks) in two
    columns beside a narrower plot."""
    wide = len(entries) > 12
    frame.ax.set_position(narrow if wide else axes)
    frame.legend(entries, 0.62 if wide else 0.72, 0.52, 2 if wide else 1)


ERROR_AXES, ERROR_NARROW = (0.08, 0.16, 0.62, 0.72), (0.08, 0.16, 0.52, 0.72)
GRADIENT_AXES, GRADIENT_NARROW = (0.08, 0.17, 0.62, 0.7), (0.08, 0.17, 0.52, 0.7)


def _colours(slices: list[tuple[int, int]]) -> dict[tuple[int, int], tuple]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(slices) <= 10 else "tab20"]
    return {s: cmap(i % cmap.N) for i, s in enumerate(slices)}


def _jitter(slices: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """x offsets of the (layer, direction) slices' markers side by side, so that equal
    errors stay visible."""
    gap = min(0.12, 0.7 / max(1, len(slices)))
    return {s: (i - (len(slices) - 1) / 2) * gap for i, s in enumerate(slices)}


def error_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs against t, a line per (layer, direction) of ``y``, the final states ``h_n``
    and ``c_n`` as markers at the right edge, the tolerance's ``atol`` and the noise floor.

    Rows whose verdict is DIVERGED get a red cross. Gradient rows are left out (see
    :func:`gradient_plot`). Returns False (and writes nothing) when there is nothing a log axis
    can show: no rows, or every error exactly 0.
    """
    rows = _rows(rows)
    if rows is None:
        return False
    rows = rows[rows.outputs(FORWARD)]
    if not len(rows) or not (rows.max_abs > 0).any():
        return False
    is_y = rows.output == "y"
    y, states = rows[is_y], rows[~is_y]
    final = (int(np.nanmax(y.t)) if len(y) else 0) + 1  # the x position of the final states
    slices = rows.slices()
    lo, hi = _log_levels(rows)
    colour, jitter = _colours(slices), _jitter(slices)

    with _frame(("error",), lambda: _log_axes(2.9, ERROR_AXES, "timestep t", 0.93)) as fr:
        ax, entries = fr.ax, []
        # Noise floor: the largest floor among the slices at each step (grey area under it).
        if (~np.isnan(rows.noise_floor)).any():
            steps = np.unique(y.t[~np.isnan(y.t)])
            floor_x = [int(t) for t in steps]
            floor_v = [_nanmax(y.noise_floor[y.t == t]) for t in steps]
            if len(states):
                floor_x.append(final)
                floor_v.append(_nanmax(states.noise_floor))
            entries += _noise_floor(ax, floor_x, floor_v, lo)
        lines = {(la, d) for la, d in zip(y.layer, y.direction, strict=True)
                 if not (np.isnan(la) or np.isnan(d))}
        for la, d in sorted(lines):  # a line per (layer, direction), as groupby orders them
            part = y[(y.layer == la) & (y.direction == d)]
            order = np.argsort(part.t, kind="stable")
            key = (int(la), int(d))
            _line(ax, part.t[order].astype(int), _positive(part.max_abs[order]),
                  color=colour[key], lw=1.3)
            entries.append(_Entry(f"y L{key[0]} {DIRECTION.get(key[1], key[1])}", "line",
                                  color=colour[key], lw=1.3))
        for name, marker in STATE_MARKERS.items():
            part = states[states.output == name]
            if not len(part):
                continue
            keys = [(int(la), int(d)) for la, d in zip(part.layer, part.direction, strict=True)]
            _scatter(ax, [final + jitter[k] for k in keys], _positive(part.max_abs), marker, 22,
                     facecolors="none", edgecolors=[colour[k] for k in keys])
            entries.append(_hollow(name, marker))
        atol, rtol, marks = _tolerance_marks(
            ax, rows, lambda t, la, d: final + jitter[(int(la), int(d))] if np.isnan(t) else int(t),
            lo, hi)
        ticks = sorted({int(t) for t in y.t})
        step = max(1, len(ticks) // 12)
        xt = ticks[::step] + ([final] if len(states) else [])
        ax.set_xticks(xt, [str(t) for t in ticks[::step]] + (["final"] if len(states) else []))
        ax.set_xlim(-0.5, final + 0.6)
        fr.title.set_text(f"{title}  tolerance: atol {atol:g} + rtol {rtol:g}·|ref|")
        _legend(fr, entries + marks, ERROR_AXES, ERROR_NARROW)
        fr.save(path)
    return True


def layer_heatmap(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A layer x timestep map of log10(max_abs) of ``y`` for deep stacks: drawn only when the
    adapter returned every layer's ``y`` (rows for more than one layer). Diverging cells get a
    red cross. Returns False when there is nothing to draw."""
    rows = _rows(rows)
    if rows is None:
        return False
    y = rows[rows.output == "y"]
    if len(np.unique(y.layer[~np.isnan(y.layer)])) < 2 or not (y.max_abs > 0).any():
        return False
    index, steps, grid = _pivot(y, y.t, y.max_abs)
    _, _, verdict = _pivot(y, y.t, y.bad.astype(float), index, steps)
    values = np.log10(_positive(grid))
    n_rows, n_t = values.shape
    height = 1.1 + 0.22 * n_rows
    with _frame(("layers", n_rows),
                lambda: _heatmap_axes(height, 0.8 / height, 1 - 1.2 / height, "timestep t")) as fr:
        ax = fr.ax
        im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis",
                       interpolation="nearest")
        bad_r, bad_c = np.nonzero(verdict > 0)
        if len(bad_r):
            _scatter(ax, bad_c, bad_r, "x", 14, facecolors="red", edgecolors="face",
                     linewidths=1)
        ax.set_yticks(range(n_rows), [f"L{la} {DIRECTION.get(d, d)}" for la, d in index])
        step = max(1, n_t // 16)
        ax.set_xticks(range(0, n_t, step), [str(int(t)) for t in steps[::step]])
        ax.set_xlim(-0.5, n_t - 0.5)  # the image's extent, as imshow sets it
        ax.set_ylim(n_rows - 0.5, -0.5)
        ax.set_title(title, fontsize=9, loc="left", y=1.0)  # y: where it goes, not measured
        fr.colour_bar(im)
        fr.save(path)
    return True


def gradient_plot(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """Plot max_abs of ``dx`` against t (one line: every direction adds into dx), the
    initial-state gradients ``dh0``/``dc0`` per layer and direction as markers at the left edge
    (the state before t = 0), the noise floor, ``atol`` and red crosses where a row is beyond
    tolerance. Returns False when there is nothing to draw (no such rows, or every error 0)."""
    rows = _rows(rows)
    if rows is None:
        return False
    g = rows[rows.outputs(INPUT_GRADIENTS)]
    if not len(g) or not (g.max_abs > 0).any():
        return False
    dx = g[g.output == "dx"]
    dx = dx[np.argsort(dx.t, kind="stable")]
    states = g[g.output != "dx"]
    initial = -1  # x position of dh0/dc0
    slices = states.slices()
    lo, hi = _log_levels(g)
    colour, jitter = _colours(slices), _jitter(slices)

    with _frame(("gradient",), lambda: _log_axes(
            2.6, GRADIENT_AXES, "timestep t (dx) / initial state (dh0, dc0)", 0.92)) as fr:
        ax, entries = fr.ax, []
        if (~np.isnan(g.noise_floor)).any():
            floor_x = ([initial] if len(states) else []) + [int(t) for t in dx.t]
            floor_v = ([_nanmax(states.noise_floor)] if len(states) else []) \
                + list(dx.noise_floor)
            entries += _noise_floor(ax, floor_x, floor_v, lo)
        if len(dx):
            _line(ax, dx.t.astype(int), _positive(dx.max_abs), color="0.15", lw=1.3)
            entries.append(_Entry("dx", "line", color="0.15", lw=1.3))
        for name, marker in INITIAL_MARKERS.items():
            part = states[states.output == name]
            if not len(part):
                continue
            keys = [(int(la), int(d)) for la, d in zip(part.layer, part.direction, strict=True)]
            _scatter(ax, [initial + jitter[k] for k in keys], _positive(part.max_abs), marker,
                     22, facecolors="none", edgecolors=[colour[k] for k in keys])
            entries.append(_hollow(name, marker))
        for k in slices:  # legend entries for the layer/direction colours of the markers
            entries.append(_Entry(f"L{k[0]} {DIRECTION.get(k[1], k[1])}", "marker", marker="o",
                                  size=10, facecolors=colour[k], edgecolors=colour[k],
                                  linewidths=1.0))
        atol, rtol, marks = _tolerance_marks(
            ax, g, lambda t, la, d: int(t) if not np.isnan(t) else initial + jitter[
                (int(la), int(d))], lo, hi)
        ticks = [int(t) for t in dx.t]
        step = max(1, len(ticks) // 12)
        xt = ([initial] if len(states) else []) + ticks[::step]
        ax.set_xticks(xt, (["h0/c0"] if len(states) else []) + [str(t) for t in ticks[::step]])
        ax.set_xlim(initial - 0.6, (max(ticks) if ticks else 0) + 0.5)
        fr.title.set_text(f"{title}  tolerance: atol {atol:g} + rtol {rtol:g}·|ref|")
        _legend(fr, entries + marks, GRADIENT_AXES, GRADIENT_NARROW)
        fr.save(path)
    return True


def gradient_blocks(rows: pd.DataFrame, path: Path, title: str) -> bool:
    """A (layer, direction) x parameter-block map of log10(max_abs) of the parameter gradients
    (``dW_i`` ... ``dWp``, columns in the order of the rows); cells beyond tolerance get a red
    cross, blocks a layer does not have are blank. Returns False when there is nothing to draw."""
    rows = _rows(rows)
    if rows is None:
        return False
    p = rows[~rows.outputs(FORWARD + INPUT_GRADIENTS)]
    if not len(p) or not (p.max_abs > 0).any():
        return False
    blocks = list(dict.fromkeys(p.output))  # in the order of the rows
    index, _, grid = _pivot(p, p.output, p.max_abs, cols=blocks)
    _, _, verdict = _pivot(p, p.output, p.bad.astype(float), index, blocks)
    values = np.log10(_positive(grid))
    n_rows, n_cols = values.shape
    height = 1.25 + 0.24 * n_rows  # inches: title, rows, rotated block names
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad="white")
    bottom, top = 0.75 / height, 0.35 / height
    with _frame(("blocks", n_rows),
                lambda: _heatmap_axes(height, bottom, 1 - bottom - top)) as fr:
        ax = fr.ax
        im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap,
                       interpolation="nearest")
        bad_r, bad_c = np.nonzero(np.nan_to_num(verdict) > 0)
        if len(bad_r):
            _scatter(ax, bad_c, bad_r, "x", 18, facecolors="red", edgecolors="face",
                     linewidths=1.2)
        ax.set_yticks(range(n_rows), [f"L{la} {DIRECTION.get(d, d)}" for la, d in index])
        ax.set_xticks(range(n_cols), blocks, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_xlim(-0.5, n_cols - 0.5)  # the image's extent, as imshow sets it
        ax.set_ylim(n_rows - 0.5, -0.5)
        ax.set_title(title, fontsize=9, loc="left", y=1.0)  # y: where it goes, not measured
        fr.colour_bar(im)
        fr.save(path)
    return True


def draw_pair(rows: pd.DataFrame, folder: Path, stem: str, title: str) -> tuple[bool, ...]:
    """Every plot of one pair's rows into ``folder`` as ``stem*.png``: whether each of
    :func:`error_plot`, :func:`layer_heatmap`, :func:`gradient_plot` and
    :func:`gradient_blocks` wrote its file."""
    rows = _rows(rows)  # the columns as arrays once, for all four
    return (error_plot(rows, folder / f"{stem}.png", title),
            layer_heatmap(rows, folder / f"{stem}-layers.png", f"{title}: every layer's y"),
            gradient_plot(rows, folder / f"{stem}-grad.png", f"{title}: dx, dh0, dc0"),
            gradient_blocks(rows, folder / f"{stem}-grad-blocks.png",
                            f"{title}: parameter gradients"))


class PlotWorkers:
    """Worker processes for :func:`draw_pairs`, started ahead: a spawned process takes ~1.5 s
    to import the harness and matplotlib, which it does while the caller writes the report's
    other files (summary.md takes ~2 s for the suite). ``pool`` is None where the processes
    cannot be started. A spawned process imports the caller's ``__main__`` (see
    :func:`draw_pairs`). Use as a context manager: the processes end with it."""

    def __init__(self, workers: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.pool = None
        try:
            self.pool = ProcessPoolExecutor(workers,
                                            mp_context=multiprocessing.get_context("spawn"))
            for _ in range(workers):  # one process a task while none is idle: all of them
                self.pool.submit(_warm)
        except OSError:  # e.g. no semaphores in a sandbox: the plots are drawn in the caller
            self.close()

    def __enter__(self) -> PlotWorkers:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None


def _warm() -> None:
    """A worker's first task: the imports its plots need."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401


def draw_pairs(jobs: list[tuple[pd.DataFrame, Path, str, str]], workers: int = 1,
               started: PlotWorkers | None = None) -> list[tuple[bool, ...]]:
    """:func:`draw_pair` of every job (its arguments), results in order. From
    :data:`MIN_PARALLEL` jobs on, in ``workers`` spawned processes (those of ``started`` when
    given); here when there is one, or when the processes cannot be started. A spawned
    process imports the caller's ``__main__``: a script calling this with workers must guard
    its top level with ``if __name__ == "__main__"`` (``python -m harness`` and the console
    script are)."""
    if workers > 1 and len(jobs) >= MIN_PARALLEL:
        from concurrent.futures.process import BrokenProcessPool

        own = started is None
        pool = PlotWorkers(min(workers, len(jobs))) if own else started
        try:
            if pool.pool is not None:
                return list(pool.pool.map(draw_pair, *zip(*jobs, strict=True), chunksize=4))
        except (BrokenProcessPool, OSError):
            pass  # draw them here
        finally:
            if own:
                pool.close()
    return [draw_pair(*job) for job in jobs]
