"""Per-timestep divergence of an adapter's outputs from the float64 reference, and verdicts.

One row per output (y, h_n, c_n) x layer x direction x timestep (``t`` is empty for the final
states). Gradient cases add rows for the backward pass: ``dx`` per timestep (layer 0, direction
empty: both directions contribute to it), ``dh0`` and ``dc0`` per layer and direction, and one
row per canonical parameter block named ``d`` + NAME (``dW_f``, ``dbR_i``, ``dp_o``, ``dWp``).
Metrics over the batch and feature axes of that slice (over the whole block for parameters):

- ``max_abs``  max |a − r|
- ``max_rel``  max |a − r| / max(|r|, eps) with eps the case dtype's machine epsilon, so the
  relative error stays defined where the reference is zero
- ``mean_abs`` mean |a − r|
- ``max_ulp``  max |a − r| / ulp(r) in the case dtype
- ``tol_ratio`` max |a − r| / (atol + rtol·|r|): the row passes when it is ≤ 1 (an element
  equal to the reference counts 0, also where atol = 0 and r = 0)
- ``noise_floor`` max_abs of the noise-floor reference (the reference rounded to the case dtype)
  on the same slice, and ``floor_ratio`` = max_abs / noise_floor

All of them come from one pass over each output (:mod:`harness.metrics_kernel`, compiled).
Verdicts are decided here and nowhere else: :attr:`Rows.verdict` and :func:`verdict_of`.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from harness.data import Outputs
from harness.params import block_shapes, key, layer_dirs
from harness.spec import Case, Tol

PASS, DIVERGED = "pass", "DIVERGED"
NOT_APPLICABLE, UNAVAILABLE, ERROR, BASELINE = "not applicable", "unavailable", "error", "baseline"

COLUMNS = ["case", "adapter", "output", "layer", "direction", "t", "max_abs", "max_rel", "mean_abs",
           "max_ulp", "tol_ratio", "atol", "rtol", "noise_floor", "floor_ratio", "verdict"]

PER_STEP = ("y", "dx")  # outputs with a row per timestep
FORWARD = ("y", "h_n", "c_n")  # every other output is a gradient

DEFAULT_TOLERANCE = {
    # float64 implementations agree to ~1e-15; leave room for long sequences and deep stacks.
    "float64": Tol(atol=1e-10, rtol=1e-10),
    # LAYOUTS.md §12: float32 CPU frameworks are within 3e-8..2e-7 of float64.
    "float32": Tol(atol=1e-5, rtol=1e-5),
    "float16": Tol(atol=1e-2, rtol=1e-2),
    "bfloat16": Tol(atol=3e-2, rtol=3e-2),
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


def tolerance_for(case: Case, adapter: str,
                  adapter_defaults: dict[str, Tol] | None = None) -> Tolerance:
    """Dtype default < adapter default < case top level < case per dtype < case per adapter."""
    atol, rtol = DEFAULT_TOLERANCE[case.dtype].atol, DEFAULT_TOLERANCE[case.dtype].rtol
    layers = [
        (adapter_defaults or {}).get(case.dtype),
        case.tolerance,  # its atol and rtol: the top level
        getattr(case.tolerance, case.dtype),
        case.tolerance.adapters.get(adapter),
    ]
    for t in layers:
        if t is not None:
            atol = t.atol if t.atol is not None else atol
            rtol = t.rtol if t.rtol is not None else rtol
    return Tolerance(atol, rtol)


@dataclass(frozen=True)
class _Group:
    """Rows compared at once. ``view`` turns ``a``, the reference and the noise floor (arrays
    of the output's shape) into what the kernel reads (:mod:`harness.metrics_kernel`): either
    [P, R1, R2, Q] with a row per (R1, R2), listed in row order after ``transpose`` (R1, R2),
    or flat with a row per segment from ``starts``. ``counts``: elements per row; ``labels``
    makes the rows' (layer, direction, t), -1 for none; ``key`` names the group within its
    reference."""

    key: tuple
    name: str | list[str]
    a: np.ndarray  # as the adapter returned it (any strides)
    r: Callable[[], np.ndarray]  # the reference's values, made only when needed
    floor: Callable[[], np.ndarray] | None
    view: Callable[[np.ndarray], np.ndarray]
    counts: np.ndarray | int
    labels: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]
    transpose: bool = False
    starts: np.ndarray | None = None
    reads: tuple[str, ...] = ()  # the adapter's outputs (saved names) ``a`` holds whole

    def metrics(self, a: np.ndarray, r: np.ndarray, dtype: str, tol: Tolerance,
                memo: dict | None = None) -> np.ndarray:
        """[5, rows] :data:`harness.metrics_kernel.METRICS` of viewed ``a`` against ``r``
        (``memo``: kept with ``r``, see :func:`harness.metrics_kernel.rows`)."""
        from harness import metrics_kernel

        if self.starts is not None:
            return metrics_kernel.segments(a, r, self.starts, dtype, tol.atol, tol.rtol)
        m = metrics_kernel.rows(a, r, dtype, tol.atol, tol.rtol, memo)
        return (m.transpose(0, 2, 1) if self.transpose else m).reshape(5, -1)


def _grid(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row labels of the outer product of ``a`` and ``b`` (``a`` varies slowest)."""
    return np.repeat(a, len(b)), np.tile(b, len(a))


def _groups(case: Case, out: Outputs, ref: Outputs, floor: Outputs | None) -> list[_Group]:
    """y [B, T, D*F] as [B, T, D, F] -> rows (direction, t) per layer; h_n, c_n, dh0, dc0
    [L*D, B, F] as [B, L, D, F] -> rows (layer, direction); dx [B, T, I] as [B, T, 1, I] ->
    rows t; the parameter blocks, one flat array -> a row each."""
    L, D, F, B, T = case.num_layers, case.num_directions, case.out_size, case.batch, case.seq_len
    dirs = np.asarray(case.directions)
    groups = []

    def const(x):
        return None if x is None else lambda: x

    fl = floor.named() if floor is not None else {}
    if out.y_layers is not None and ref.y_layers is not None and len(out.y_layers) == L:
        fys = floor.y_layers if floor is not None and floor.y_layers else [None] * (L - 1) + [
            fl.get("y")]
        ys = list(zip(range(L), out.y_layers, ref.y_layers, fys, strict=True))
    else:
        ys = [(L - 1, out.y, ref.y, fl.get("y"))]
    def y_labels(layer):
        d, t = _grid(dirs, np.arange(T))
        return np.full(d.size, layer), d, t

    for layer, a, r, f in ys:
        groups.append(_Group(("y", layer), "y", a, const(r), const(f),
                             lambda x: x.reshape(B, T, D, F), B * F,
                             lambda layer=layer: y_labels(layer), transpose=True,
                             reads=("y",) if a is out.y else ()))

    def state_labels():
        layer, d = _grid(np.arange(L), dirs)
        return layer, d, np.full(layer.size, -1)

    def states(names, a, r, f):
        for name in names:
            if a.get(name) is not None and r.get(name) is not None:
                n = a[name].shape[-1]
                groups.append(_Group((name,), name, a[name], const(r[name]), const(f.get(name)),
                                     lambda x, n=n: x.reshape(L, D, B, n).transpose(2, 0, 1, 3),
                                     B * n, state_labels, reads=(name,)))

    states(("h_n", "c_n"), out.named(), ref.named(), fl)
    if out.grads is None or ref.grads is None:
        return groups
    g, rg = out.grads, ref.grads
    gf = floor.grads if floor is not None and floor.grads is not None else None
    gfn = gf.named() if gf is not None else {}
    groups.append(_Group(("dx",), "dx", g.dx, const(rg.dx), const(gfn.get("dx")),
                         lambda x: x.reshape(B, T, 1, -1), B * case.input_size,
                         lambda: (np.zeros(T, dtype=np.int64), np.full(T, -1), np.arange(T)),
                         reads=("dx",)))
    states(("dh0", "dc0"), g.named(), rg.named(), gfn)
    # every parameter block in one flat array, a row (segment) per block
    blocks = [(layer, d, b) for layer, d in layer_dirs(case) for b in block_shapes(case, layer)]
    keys = [key(*blk) for blk in blocks]
    sizes = np.array([rg.params[k].size for k in keys])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def flat(params):
        return lambda: np.concatenate([params[k].ravel() for k in keys])

    layer, d, name = zip(*blocks, strict=True)
    groups.append(_Group(("params",), [f"d{n}" for n in name], flat(g.params)(),
                         flat(rg.params), flat(gf.params) if gf else None, lambda x: x, sizes,
                         lambda: (np.array(layer), np.array(d), np.full(len(keys), -1)),
                         starts=starts, reads=tuple(f"grad/{k}" for k in keys)))
    return groups


@dataclass
class _Baseline:
    """What the metrics need of the reference, per group: its values viewed for the kernel
    and the noise floor's maxima. The same for every adapter of a case, so it is
    kept (up to ``KEEP_BYTES`` per reference) while the reference lives; a kept group's
    kernel memo may add its values copied in the axis order of an adapter's output (up to
    ``metrics_kernel.R_COPY_MAX_BYTES`` for each such order)."""

    ref: weakref.ref
    floor: weakref.ref | None
    groups: dict = field(default_factory=dict)
    kept: int = 0
    plans: dict = field(default_factory=dict)  # group keys -> _Plan


KEEP_BYTES = 256 * 2**20
_BASELINES: dict[int, _Baseline] = {}


def _baseline(ref: Outputs, floor: Outputs | None) -> _Baseline:
    b = _BASELINES.get(id(ref))
    if b is None or b.ref() is not ref or (b.floor() if b.floor else None) is not floor:
        b = _Baseline(weakref.ref(ref), weakref.ref(floor) if floor is not None else None)
        _BASELINES[id(ref)] = b
        weakref.finalize(ref, _BASELINES.pop, id(ref), None)
    return b


_NO_TOLERANCE = Tolerance(1.0, 0.0)  # the noise floor's maxima need max_abs only


def _reference_side(g: _Group, b: _Baseline, dtype: str) -> dict[str, np.ndarray]:
    part = b.groups.get(g.key)
    if part is not None:
        return part
    r = g.view(np.ascontiguousarray(g.r(), dtype=np.float64))
    part = {"r": r, "calls": {}}
    if g.floor is not None:
        part["floor"] = g.metrics(g.view(g.floor()), r, dtype, _NO_TOLERANCE)[0]
    if b.kept + r.nbytes <= KEEP_BYTES:
        b.groups[g.key], b.kept = part, b.kept + r.nbytes
    return part


@dataclass
class Rows:
    """The divergence rows of one pair as columns, one value per row in every array, in row
    order. A run keeps them this way (a pair builds no DataFrame); :func:`frame_of` makes one
    DataFrame of many pairs' rows (:data:`COLUMNS`), :meth:`frame` of this pair's.

    ``layer``, ``direction``, ``t``: int64, -1 for none (no direction: dx; no timestep:
    final states, parameters); ``metrics``: ``max_abs``, ``max_rel``, ``mean_abs``,
    ``max_ulp``, ``tol_ratio``, ``noise_floor``, ``floor_ratio`` (float64)."""

    case: str
    adapter: str
    output: list[str]
    layer: np.ndarray
    direction: np.ndarray
    t: np.ndarray
    metrics: dict[str, np.ndarray]
    atol: float
    rtol: float
    reads: frozenset[str] = frozenset()  # the adapter's outputs every element of which was read

    def __len__(self) -> int:
        return len(self.output)

    @property
    def verdict(self) -> str:
        """PASS when every row is within tolerance (a NaN ratio is not): :func:`verdict_of`
        without a DataFrame."""
        return PASS if bool((self.metrics["tol_ratio"] <= 1.0).all()) else DIVERGED

    @property
    def finite(self) -> bool:
        """No NaN or Inf in what was read: every row's sum of errors is finite (a NaN or Inf
        in the adapter's output makes its row's sum one; so may an overflowing sum)."""
        return bool(np.isfinite(self.metrics["mean_abs"]).all())

    def frame(self) -> pd.DataFrame:
        return frame_of([self])

    def row(self, i: int) -> dict:
        """Row ``i`` as the frame has it (:data:`COLUMNS`; NA for no direction or timestep)."""
        def label(v) -> object:  # an int, or pd.NA
            return pd.NA if v < 0 else int(v)

        m = self.metrics
        row = {"case": self.case, "adapter": self.adapter, "output": self.output[i],
               "layer": int(self.layer[i]), "direction": label(self.direction[i]),
               "t": label(self.t[i]), **{k: float(m[k][i]) for k in METRIC_COLUMNS},
               "atol": self.atol, "rtol": self.rtol,
               "verdict": PASS if m["tol_ratio"][i] <= 1.0 else DIVERGED}
        return {k: row[k] for k in COLUMNS}

    def worst(self) -> dict | None:
        """The row furthest beyond (or closest to) its tolerance (first of equals; NaN
        ratios skipped), without a frame."""
        ratio = self.metrics["tol_ratio"]
        if np.isnan(ratio).all():  # no rows, or no ratio at all
            return None
        return self.row(int(np.nanargmax(ratio)))

    def first_diverging(self) -> dict | None:
        """:func:`first_divergence` without a frame."""
        bad = ~(self.metrics["tol_ratio"] <= 1.0)
        if not bad.any():
            return None
        y = np.flatnonzero(bad & (np.asarray(self.output) == "y"))
        if y.size:
            return self.row(int(y[np.lexsort((self.direction[y], self.layer[y], self.t[y]))[0]]))
        return self.row(int(np.flatnonzero(bad)[0]))


METRIC_COLUMNS = ("max_abs", "max_rel", "mean_abs", "max_ulp", "tol_ratio", "noise_floor",
                  "floor_ratio")


def frame_of(blocks: list[Rows]) -> pd.DataFrame:
    """One DataFrame (:data:`COLUMNS`) of the rows of ``blocks``, in their order: one
    concatenation per column, so a run pays for one frame, not one per pair."""
    if not blocks:
        return pd.DataFrame(columns=COLUMNS)
    n = [len(b) for b in blocks]

    def each(values) -> np.ndarray:  # one value per block, repeated over its rows
        return np.repeat(np.asarray(values, dtype=object), n)

    def cat(arrays) -> np.ndarray:
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]

    data: dict = {"case": each([b.case for b in blocks]),
                  "adapter": each([b.adapter for b in blocks]),
                  "output": [o for b in blocks for o in b.output],
                  "layer": cat([b.layer for b in blocks])}
    for k in ("direction", "t"):  # -1: missing (pandas' nullable integers)
        v = cat([getattr(b, k) for b in blocks])
        data[k] = pd.arrays.IntegerArray(v, v < 0)
    for k in METRIC_COLUMNS:
        data[k] = cat([b.metrics[k] for b in blocks])
    data["atol"] = np.repeat([b.atol for b in blocks], n)
    data["rtol"] = np.repeat([b.rtol for b in blocks], n)
    data["verdict"] = np.where(data["tol_ratio"] <= 1.0, PASS, DIVERGED)
    return pd.DataFrame(data, columns=COLUMNS)


@dataclass(frozen=True)
class _Plan:
    """What a pair's rows share with every other adapter's rows of the case (with the same
    groups): the rows' labels, elements per row, the noise floor's max_abs per row (NaN: no
    floor) and each group's columns [lo, hi)."""

    output: list[str]
    layer: np.ndarray
    direction: np.ndarray
    t: np.ndarray
    counts: np.ndarray
    floor: np.ndarray
    spans: list[tuple[int, int]]

    @cached_property
    def floor_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the floor where > 0, else 1; rows with a floor of 0; rows with none, NaN)."""
        fl = self.floor
        return (np.where(fl > 0, fl, 1.0), np.flatnonzero(fl == 0),
                np.flatnonzero(np.isnan(fl)))

    def floor_ratio(self, mx: np.ndarray) -> np.ndarray:
        """max_abs / noise floor per row: inf where the floor is 0 and max_abs is not (1 where
        both are), NaN where the output has no floor (a few NumPy calls: a pair pays them on
        cold caches, right after its forward)."""
        divisor, zero, none = self.floor_parts
        ratio = mx / divisor
        if zero.size:
            ratio[zero] = np.where(mx[zero] > 0, np.inf, 1.0)
        if none.size:
            ratio[none] = np.nan
        return ratio


def _plan(groups: list[_Group], parts: list[dict[str, np.ndarray]], b: _Baseline) -> _Plan:
    keys = tuple(g.key for g in groups)
    plan = b.plans.get(keys)
    if plan is not None:
        return plan
    output, labels, counts, floors, spans, lo = [], [], [], [], [], 0
    for g, part in zip(groups, parts, strict=True):
        lab = g.labels()
        n = lab[0].size
        output += g.name if isinstance(g.name, list) else [g.name] * n
        labels.append(lab)
        counts.append(np.broadcast_to(np.asarray(g.counts, dtype=np.float64), (n,)))
        floors.append(part["floor"] if "floor" in part else np.full(n, np.nan))
        spans.append((lo, lo + n))
        lo += n
    layer, direction, t = (np.concatenate([lab[i] for lab in labels]).astype(np.int64)
                           for i in range(3))
    plan = _Plan(output, layer, direction, t, np.concatenate(counts), np.concatenate(floors),
                 spans)
    b.plans[keys] = plan
    return plan


def prime(case: Case, ref: Outputs, floor: Outputs | None = None) -> None:
    """Make now what every adapter's rows of the case share (:func:`harness.prepare.prepare`
    calls it after the reference and the noise floor): the reference's side of each output
    and the noise floor's maxima (kept with ``ref``, up to :data:`KEEP_BYTES`), and the rows'
    plans for both forms an adapter's outputs come in, every layer's ``y`` or the last one's.
    Otherwise the case's first compared pair would make them, cold, right after its forward."""
    b = _baseline(ref, floor)
    forms = [ref] if ref.y_layers is None else [ref, dataclasses.replace(ref, y_layers=None)]
    for out in forms:
        groups = _groups(case, out, ref, floor)
        _plan(groups, [_reference_side(g, b, case.dtype) for g in groups], b)


def rows_of(case: Case, adapter: str, out: Outputs, ref: Outputs, tol: Tolerance,
            floor: Outputs | None = None) -> Rows:
    """The divergence rows of one case x adapter pair (vectorised over timesteps): one kernel
    pass per output, the rest shared by the case's adapters (:class:`_Plan`)."""
    baseline = _baseline(ref, floor)
    groups = _groups(case, out, ref, floor)
    parts = [_reference_side(g, baseline, case.dtype) for g in groups]
    plan = _plan(groups, parts, baseline)
    m = np.empty((5, len(plan.output)))
    for g, part, (lo, hi) in zip(groups, parts, plan.spans, strict=True):
        m[:, lo:hi] = g.metrics(g.view(g.a), part["r"], case.dtype, tol, part["calls"])
    mx, total, tol_ratio, rel, ulps = m
    fl = plan.floor
    ratio = plan.floor_ratio(mx)
    return Rows(case.name, adapter, plan.output, plan.layer, plan.direction, plan.t,
                {"max_abs": mx, "max_rel": rel, "mean_abs": total / plan.counts,
                 "max_ulp": ulps, "tol_ratio": tol_ratio, "noise_floor": fl,
                 "floor_ratio": ratio}, tol.atol, tol.rtol,
                frozenset(name for g in groups for name in g.reads))


def divergence(case: Case, adapter: str, out: Outputs, ref: Outputs, tol: Tolerance,
               floor: Outputs | None = None) -> pd.DataFrame:
    """:func:`rows_of` as a DataFrame (:data:`COLUMNS`)."""
    return rows_of(case, adapter, out, ref, tol, floor).frame()


def verdict_of(rows: pd.DataFrame) -> str:
    """A pair passes when every one of its rows is within tolerance."""
    return PASS if (rows["verdict"].to_numpy(dtype=object) == PASS).all() else DIVERGED


def where(row: pd.Series) -> str:
    """A row's place in words, e.g. ``y L1 d0 t=3``, ``dW_f L0 d1``, ``dx L0 t=2`` (a missing
    t or direction, empty or negative as read back from a CSV, is left out)."""
    def known(v) -> bool:
        return not pd.isna(v) and v >= 0

    d = f" d{int(row['direction'])}" if known(row["direction"]) else ""
    t = f" t={int(row['t'])}" if known(row["t"]) else ""
    return f"{row['output']} L{int(row['layer'])}{d}{t}"


def first_divergence(rows: pd.DataFrame) -> pd.Series | None:
    """The earliest diverging y row (lowest t, then layer), or the first diverging state row."""
    bad = rows[rows["verdict"] == DIVERGED]
    if bad.empty:
        return None
    y = bad[bad["output"] == "y"].sort_values(["t", "layer", "direction"])
    return (y if not y.empty else bad).iloc[0]
