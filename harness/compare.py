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
Verdicts are decided here and nowhere else: :func:`verdict_of`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

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
        Tol(atol=case.tolerance.atol, rtol=case.tolerance.rtol),
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
    or flat with a row per segment from ``starts``. ``counts``: elements per row; ``labels``:
    the rows' (layer, direction, t), -1 for none; ``key`` names the group within its
    reference."""

    key: tuple
    name: str | list[str]
    a: np.ndarray  # as the adapter returned it (any strides)
    r: Callable[[], np.ndarray]  # the reference's values, made only when needed
    floor: Callable[[], np.ndarray] | None
    view: Callable[[np.ndarray], np.ndarray]
    counts: np.ndarray | int
    labels: tuple[np.ndarray, np.ndarray, np.ndarray]
    transpose: bool = False
    starts: np.ndarray | None = None

    def metrics(self, a: np.ndarray, r: np.ndarray, dtype: str, tol: Tolerance) -> np.ndarray:
        """[5, rows] :data:`harness.metrics_kernel.METRICS` of viewed ``a`` against ``r``."""
        from harness import metrics_kernel

        if self.starts is not None:
            return metrics_kernel.segments(a, r, self.starts, dtype, tol.atol, tol.rtol)
        m = metrics_kernel.rows(a, r, dtype, tol.atol, tol.rtol)
        return (m.transpose(0, 2, 1) if self.transpose else m).reshape(5, -1)


def _grid(*columns) -> tuple[np.ndarray, ...]:
    """Row labels of the outer product of ``columns`` (first varies slowest)."""
    return tuple(g.ravel() for g in np.meshgrid(*columns, indexing="ij"))


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
    d, t = _grid(dirs, np.arange(T))
    for layer, a, r, f in ys:
        groups.append(_Group(("y", layer), "y", a, const(r), const(f),
                             lambda x: x.reshape(B, T, D, F), B * F,
                             (np.full(d.size, layer), d, t), transpose=True))

    def states(names, a, r, f):
        layer, d = _grid(np.arange(L), dirs)
        for name in names:
            if a.get(name) is not None and r.get(name) is not None:
                n = a[name].shape[-1]
                groups.append(_Group((name,), name, a[name], const(r[name]), const(f.get(name)),
                                     lambda x, n=n: x.reshape(L, D, B, n).transpose(2, 0, 1, 3),
                                     B * n, (layer, d, np.full(layer.size, -1))))

    states(("h_n", "c_n"), out.named(), ref.named(), fl)
    if out.grads is None or ref.grads is None:
        return groups
    g, rg = out.grads, ref.grads
    gf = floor.grads if floor is not None and floor.grads is not None else None
    gfn = gf.named() if gf is not None else {}
    groups.append(_Group(("dx",), "dx", g.dx, const(rg.dx), const(gfn.get("dx")),
                         lambda x: x.reshape(B, T, 1, -1), B * case.input_size,
                         (np.zeros(T, dtype=np.int64), np.full(T, -1), np.arange(T))))
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
                         (np.array(layer), np.array(d), np.full(len(keys), -1)),
                         starts=starts))
    return groups


@dataclass
class _Baseline:
    """What the metrics need of the reference, per group: its values viewed for the kernel
    and the noise floor's maxima. The same for every adapter of a case, so it is
    kept (up to ``KEEP_BYTES`` per reference) while the reference lives."""

    ref: weakref.ref
    floor: weakref.ref | None
    groups: dict = field(default_factory=dict)
    kept: int = 0


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
    part = {"r": r}
    if g.floor is not None:
        part["floor"] = g.metrics(g.view(g.floor()), r, dtype, _NO_TOLERANCE)[0]
    if b.kept + r.nbytes <= KEEP_BYTES:
        b.groups[g.key], b.kept = part, b.kept + r.nbytes
    return part


def _metrics(g: _Group, tol: Tolerance, part: dict[str, np.ndarray],
             dtype: str) -> dict[str, np.ndarray]:
    """The metrics of one group, one value per row, in one pass over the errors."""
    mx, total, tol_ratio, rel, ulps = g.metrics(g.view(g.a), part["r"], dtype, tol)
    m = {"max_abs": mx, "mean_abs": total / g.counts, "tol_ratio": tol_ratio, "max_rel": rel,
         "max_ulp": ulps}
    if "floor" in part:
        fl = part["floor"]
        with np.errstate(divide="ignore", invalid="ignore"):
            m["noise_floor"] = fl
            m["floor_ratio"] = np.where(fl > 0, mx / np.where(fl > 0, fl, 1.0),
                                        np.where(mx > 0, np.inf, 1.0))
    else:
        m["noise_floor"] = m["floor_ratio"] = np.full(mx.size, np.nan)
    return m


def divergence(
    case: Case,
    adapter: str,
    out: Outputs,
    ref: Outputs,
    tol: Tolerance,
    floor: Outputs | None = None,
) -> pd.DataFrame:
    """The divergence rows of one case x adapter pair (vectorised over timesteps)."""
    baseline = _baseline(ref, floor)
    names, labels, metrics = [], [], []
    for g in _groups(case, out, ref, floor):
        m = _metrics(g, tol, _reference_side(g, baseline, case.dtype), case.dtype)
        metrics.append(m)
        names += g.name if isinstance(g.name, list) else [g.name] * m["max_abs"].size
        labels.append(g.labels)
    data: dict = {"case": case.name, "adapter": adapter, "output": names,
                  "layer": np.concatenate([lab[0] for lab in labels]).astype(np.int64)}
    for i, k in ((1, "direction"), (2, "t")):  # -1: no direction (dx), no timestep (states)
        v = np.concatenate([lab[i] for lab in labels]).astype(np.int64)
        data[k] = pd.arrays.IntegerArray(v, v < 0)
    for k in ("max_abs", "max_rel", "mean_abs", "max_ulp", "tol_ratio", "noise_floor",
              "floor_ratio"):
        data[k] = np.concatenate([m[k] for m in metrics])
    data["atol"], data["rtol"] = tol.atol, tol.rtol
    data["verdict"] = np.where(data["tol_ratio"] <= 1.0, PASS, DIVERGED)
    return pd.DataFrame(data, columns=COLUMNS)


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
