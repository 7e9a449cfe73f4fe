"""Per-timestep divergence of an adapter's outputs from the float64 reference, and verdicts.

One row per output (y, h_n, c_n) x layer x direction x timestep (``t`` is empty for the final
states). Gradient cases add rows for the backward pass: ``dx`` per timestep (layer 0, direction
empty: both directions contribute to it), ``dh0`` and ``dc0`` per layer and direction, and one
row per canonical parameter block named ``d`` + NAME (``dW_f``, ``dbR_i``, ``dp_o``, ``dWp``).
Metrics over the batch and feature axes of that slice (over the whole block for parameters),
with e = |a − r| for the adapter's value a and the reference's r:

- ``max_abs``  max e
- ``max_rel``  max e / max(|r|, eps) with eps the case dtype's machine epsilon, so the
  relative error stays defined where the reference is zero
- ``mean_abs`` mean e
- ``max_ulp``  max e / ulp(r), the spacing of the case dtype at r (:func:`harness.dtypes.ulp`)
- ``tol_ratio`` max e / (atol + rtol·|r|) (:func:`tol_ratios`): an element equal to the
  reference counts 0, also where atol = 0 and r = 0
- ``noise_floor`` max |f − r| of the noise-floor reference f (the reference computed in the
  case dtype's arithmetic: :class:`harness.reference.functions.Precision`) on the same slice,
  and ``floor_ratio`` = max_abs / noise_floor (inf where the floor is 0 and max_abs is not, 1
  where both are; NaN where there is no floor)

A row is within tolerance when its ``tol_ratio`` is at most 1, or, in a case of a lower
precision than float64 judged by the default tolerances, when its ``floor_ratio`` is at most
:data:`NOISE_FLOOR_FACTOR` (:func:`within`, the one place that says so; docs/equations.md
says why); a pair passes when all of its free-running rows are (:attr:`Divergence.passed`,
:func:`pair_verdict`: step-local rows explain a verdict, never change it). A pair's judge
(:mod:`harness.judges`) builds its verdict on these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.data import Outputs
from harness.dtypes import FORMATS, ulp
from harness.params import block_shapes, key, layer_dirs
from harness.spec import Case, Tol

PASS, DIVERGED = "pass", "DIVERGED"
NOT_APPLICABLE, UNAVAILABLE, ERROR, BASELINE = "not applicable", "unavailable", "error", "baseline"
# how the reason of a not-applicable pair the case's adapters:/exclude: left out begins: reports
# count those pairs in a line per case instead of giving each a row
NOT_SELECTED = "not selected by the case"
# a pair the case expects to diverge (``expected:``, an open upstream bug): as expected, or not
KNOWN_BUG, LOOKS_FIXED = "known upstream bug", "looks fixed"
COMPARED = (PASS, DIVERGED, KNOWN_BUG, LOOKS_FIXED)  # statuses of a pair that compared outputs

COLUMNS = ["case", "adapter", "mode", "output", "layer", "direction", "t", "max_abs", "max_rel",
           "mean_abs", "max_ulp", "tol_ratio", "atol", "rtol", "noise_floor", "floor_ratio",
           "verdict"]
# every pair's columns; a judge whose figures add columns of their own (Figures.columns) adds
# them before ``verdict`` in divergence.csv (harness.judges.columns), empty on other pairs' rows
METRICS = ("max_abs", "max_rel", "mean_abs", "max_ulp", "tol_ratio", "noise_floor")

# the ``mode`` of a row: free-running, or step-local (harness.steplocal)
FREE, STEP = "free", "step"

PER_STEP = ("y", "dx")  # outputs with a row per timestep
FORWARD = ("y", "h_n", "c_n")  # every other output is a gradient

DEFAULT_TOLERANCE = {
    # float64 implementations agree to ~1e-15; leave room for long sequences and deep stacks.
    "float64": Tol(atol=1e-10, rtol=1e-10),
    # float32 CPU frameworks are within 3e-8..2e-7 of float64 on the bundled cases.
    "float32": Tol(atol=1e-5, rtol=1e-5),
    "float16": Tol(atol=1e-2, rtol=1e-2),
    "bfloat16": Tol(atol=3e-2, rtol=3e-2),
}


NOISE_FLOOR_FACTOR = 8.0
"""k: a row of a lower-precision case also passes within k x its noise floor. Correct float32,
float16 and bfloat16 CPU frameworks sit at up to 3.7x the floor on rows of more than a few
elements (trained-like: up to 3.7x; lowp: up to 2.8x); a single sample of the floor on a row
of two elements can be lucky (16x on seed001-cudnnlstm-h2), where the tolerance passes it.
Layout mistakes are 10⁴x the floor and more. docs/equations.md has the measurements."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    floor_factor: float | None = None  # k of :func:`within`; None: atol and rtol alone decide


def tolerance_for(case: Case, adapter: str,
                  adapter_defaults: dict[str, Tol] | None = None) -> Tolerance:
    """Dtype default < adapter default < case top level < case per dtype < case per adapter.

    A case of a lower precision than float64 also passes rows within
    :data:`NOISE_FLOOR_FACTOR` x the noise floor, unless the case sets a tolerance that
    covers the pair: then its atol and rtol are the whole rule (a case may demand closer
    agreement than the floor allows)."""
    atol, rtol = DEFAULT_TOLERANCE[case.dtype].atol, DEFAULT_TOLERANCE[case.dtype].rtol
    floor_factor = None if case.dtype == "float64" else NOISE_FLOOR_FACTOR
    set_by_case = [
        case.tolerance,  # its atol and rtol: the top level
        getattr(case.tolerance, case.dtype),
        case.tolerance.adapters.get(adapter),
    ]
    for i, t in enumerate([(adapter_defaults or {}).get(case.dtype), *set_by_case]):
        if t is not None and (t.atol is not None or t.rtol is not None):
            atol = t.atol if t.atol is not None else atol
            rtol = t.rtol if t.rtol is not None else rtol
            if i > 0:
                floor_factor = None
    return Tolerance(atol, rtol, floor_factor)


# The verdict -----------------------------------------------------------------------------------

Ratios = np.ndarray | pd.Series | float


def within(tol_ratio: Ratios, floor_ratio: Ratios | None = None,
           floor_factor: float | None = None) -> np.ndarray:
    """Whether each error is within tolerance: the verdict rule. It is when it is at most
    atol + rtol·|r| (``tol_ratio`` ≤ 1), or, given a ``floor_factor`` k (a lower-precision
    case: :func:`tolerance_for`), at most k x the noise floor (``floor_ratio`` ≤ k). A NaN
    ratio is not within."""
    return effective_ratio(tol_ratio, floor_ratio, floor_factor) <= 1.0


def effective_ratio(tol_ratio: Ratios, floor_ratio: Ratios | None = None,
                    floor_factor: float | None = None) -> np.ndarray:
    """The error as a multiple of what :func:`within` allows: ``tol_ratio``, or the smaller of
    it and ``floor_ratio / k`` where the noise-floor rule applies (NaN only where both are)."""
    ratio = np.asarray(tol_ratio, dtype=np.float64)
    if floor_factor is None or floor_ratio is None:
        return ratio
    return np.fmin(ratio, np.asarray(floor_ratio, dtype=np.float64) / floor_factor)


def verdict(tol_ratio: Ratios, floor_ratio: Ratios | None = None,
            floor_factor: float | None = None) -> str:
    """PASS when every row is :func:`within` tolerance (so also for none), else DIVERGED."""
    return PASS if bool(within(tol_ratio, floor_ratio, floor_factor).all()) else DIVERGED


def of_mode(rows: pd.DataFrame | None, mode: str) -> pd.DataFrame | None:
    """The rows of one mode (``free`` or ``step``); rows without a ``mode`` column (reports
    written before step mode) are free-running."""
    if rows is None:
        return None
    if "mode" not in rows.columns:
        return rows if mode == FREE else rows.iloc[:0]
    return rows[rows["mode"].fillna(FREE) == mode]


def pair_verdict(free_rows: pd.DataFrame, step_rows: pd.DataFrame | None = None,
                 floor_factor: float | None = None) -> tuple[str, str]:
    """(verdict, reason) of a pair. The verdict is its free-running rows' alone, each row
    judged by :func:`within` (``floor_factor``: the pair's :attr:`Tolerance.floor_factor`):
    PASS when all are within. Step-local rows (None or empty: step mode not run) never change
    it, only the reason says what they show. They inject the reference's state at every step,
    so they test the cell function and are blind to everything that goes wrong in how state
    travels along the sequence (chunks, padded steps, initial state, lengths, direction
    reversal): excusing a free-running divergence by them let exactly those bugs pass."""
    free_ok = _rows_within(free_rows, floor_factor)
    status = PASS if free_ok.all() else DIVERGED
    if step_rows is None or step_rows.empty:
        return status, ""
    step_ok = _rows_within(step_rows, floor_factor)
    if not step_ok.all():
        bad = step_rows[~step_ok].sort_values(["t", "layer", "direction"], kind="stable")
        f = bad.iloc[0]
        return status, (f"one-step error beyond tolerance from the reference's state, "
                        f"first at {where(f)}: max_abs {f['max_abs']:.2e} "
                        f"({f['tol_ratio']:.3g}x tolerance): the cell itself differs")
    forward_bad = free_rows[~free_ok & free_rows["output"].isin(FORWARD).to_numpy()]
    if not forward_bad.empty:  # step mode checks the forward only: it says nothing of gradients
        return DIVERGED, f"{DIVERGED} at {where(_first(forward_bad))}; {STATE_NOT_CELL}"
    return status, ""


STATE_NOT_CELL = ("every one-step error within tolerance: the cell is right, the error builds "
                  "along the sequence: check state carrying (chunks, padding, initial state, "
                  "lengths) or rounding amplified by the recurrence")
"""What step mode learned from a free-running divergence whose every one-step error is within
tolerance (:func:`pair_verdict`)."""


READ_BACK_ROUNDING = 1e-5
"""divergence.csv keeps the ratios to 6 significant digits: a row read back whose ratio lies
this close to its bound is judged by the verdict written beside it."""


def _rows_within(rows: pd.DataFrame, floor_factor: float | None) -> np.ndarray:
    floor = rows["floor_ratio"] if "floor_ratio" in rows.columns else None
    ok = np.asarray(within(rows["tol_ratio"], floor, floor_factor))
    if "verdict" in rows.columns and len(rows):
        at_bound = np.abs(effective_ratio(rows["tol_ratio"], floor, floor_factor) - 1.0) \
            <= READ_BACK_ROUNDING
        ok = np.where(at_bound, rows["verdict"].to_numpy() != DIVERGED, ok)
    return ok


def tol_ratios(a: np.ndarray, r: np.ndarray, tol: Tolerance) -> np.ndarray:
    """|a − r| / (atol + rtol·|r|) per element, 0 where a equals r (also where atol = 0 and
    r = 0); NaN where a is NaN, inf where a is infinite."""
    e = np.abs(np.subtract(a, r, dtype=np.float64))
    return _quotient(e, np.abs(r) * tol.rtol + tol.atol)


def _quotient(e: np.ndarray, d: np.ndarray) -> np.ndarray:
    """e / d written into ``d``, 0 where e is 0 (d may be 0 there)."""
    some_zero = not d.all()  # 0/0 can only come from a tolerance of 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.divide(e, d, out=d)
    if some_zero:
        q[e == 0] = 0.0
    return q


# The rows --------------------------------------------------------------------------------------

def _metrics(a: np.ndarray, r: np.ndarray, f: np.ndarray | None, dtype: str, tol: Tolerance,
             top: Callable[[np.ndarray], np.ndarray],
             mean: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """:data:`METRICS` of ``a`` against ``r`` (same shapes) per row: ``top`` reduces an
    array of the elements' values to each row's maximum, ``mean`` to each row's mean; the
    noise floor from ``f`` (NaN without one)."""
    e = np.abs(np.subtract(a, r, dtype=np.float64))
    ar = np.abs(r)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        max_abs = top(e)
        return {"max_abs": max_abs, "mean_abs": mean(e),
                "max_rel": top(e / np.maximum(ar, FORMATS[dtype].eps)),
                "max_ulp": top(e / ulp(r, dtype)),
                "tol_ratio": top(_quotient(e, ar * tol.rtol + tol.atol)),
                "noise_floor": (np.full(max_abs.shape, np.nan) if f is None
                                else top(np.abs(np.subtract(f, r, dtype=np.float64))))}


def _over(axes: tuple[int, ...], a: np.ndarray, r: np.ndarray, f: np.ndarray | None,
          dtype: str, tol: Tolerance) -> dict[str, np.ndarray]:
    """:func:`_metrics` reducing over ``axes`` (the other axes are the rows)."""
    if a.size == 0:
        rest = tuple(n for k, n in enumerate(a.shape) if k not in axes)
        return {m: np.zeros(rest) for m in METRICS}
    return _metrics(a, r, f, dtype, tol, lambda q: q.max(axis=axes),
                    lambda q: q.mean(axis=axes))


@dataclass
class _Part:
    """Rows of one output: their names, labels and metrics, one value per row each."""

    output: list[str]
    layer: np.ndarray
    direction: np.ndarray  # -1: none
    t: np.ndarray  # -1: none
    metrics: dict[str, np.ndarray]


def _parts(case: Case, out: Outputs, ref: Outputs, floor: Outputs | None,
           tol: Tolerance) -> list[_Part]:
    """Every output's rows, in row order: y (each layer's where both sides have them all, else
    the last layer's) by direction then t, h_n and c_n by layer then direction; for gradients
    dx by t, dh0 and dc0 like the states, then the parameter blocks in canonical order."""
    L, D, F, B, T = case.num_layers, case.num_directions, case.out_size, case.batch, case.seq_len
    dirs = np.asarray(case.directions, dtype=np.int64)
    dtype = case.dtype
    parts: list[_Part] = []

    def flat(m: dict[str, np.ndarray], order: tuple[int, ...] | None = None) -> dict:
        return {k: (v.transpose(order) if order else v).ravel() for k, v in m.items()}

    fl = floor.named() if floor is not None else {}
    if out.y_layers is not None and ref.y_layers is not None and len(out.y_layers) == L:
        fys = (floor.y_layers if floor is not None and floor.y_layers
               else [None] * (L - 1) + [fl.get("y")])
        ys = list(zip(range(L), out.y_layers, ref.y_layers, fys, strict=True))
    else:
        ys = [(L - 1, out.y, ref.y, fl.get("y"))]
    for layer, a, r, f in ys:
        shape = (B, T, D, F)
        m = _over((0, 3), a.reshape(shape), r.reshape(shape),
                  None if f is None else f.reshape(shape), dtype, tol)  # [T, D]
        parts.append(_Part(["y"] * (D * T), np.full(D * T, layer), np.repeat(dirs, T),
                           np.tile(np.arange(T), D), flat(m, (1, 0))))

    def states(a: dict, r: dict, f: dict, names: tuple[str, ...]) -> None:
        for name in names:
            if a.get(name) is None or r.get(name) is None:
                continue
            shape = (L, D, B, a[name].shape[-1])
            fn = f.get(name)
            m = _over((2, 3), a[name].reshape(shape), r[name].reshape(shape),
                      None if fn is None else fn.reshape(shape), dtype, tol)
            parts.append(_Part([name] * (L * D), np.repeat(np.arange(L), D), np.tile(dirs, L),
                               np.full(L * D, -1), flat(m)))

    states(out.named(), ref.named(), fl, ("h_n", "c_n"))
    if out.grads is None or ref.grads is None:
        return parts
    g, rg = out.grads, ref.grads
    gf = floor.grads if floor is not None else None
    gfn = gf.named() if gf is not None else {}
    m = _over((0, 2), g.dx, rg.dx, gfn.get("dx"), dtype, tol)  # [T]
    parts.append(_Part(["dx"] * T, np.zeros(T, dtype=np.int64), np.full(T, -1), np.arange(T),
                       flat(m)))
    states(g.named(), rg.named(), gfn, ("dh0", "dc0"))
    # the parameter blocks end to end, a row per block
    blocks = [(layer, d, name) for layer, d in layer_dirs(case)
              for name in block_shapes(case, layer)]
    keys = [key(*blk) for blk in blocks]
    sizes = np.array([rg.params[k].size for k in keys])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def flat_params(grads) -> np.ndarray:
        return np.concatenate([grads.params[k].ravel() for k in keys])

    m = _metrics(flat_params(g), flat_params(rg), None if gf is None else flat_params(gf),
                 dtype, tol, lambda q: np.maximum.reduceat(q, starts),
                 lambda q: np.add.reduceat(q, starts) / sizes)
    layer, d, name = zip(*blocks, strict=True)
    parts.append(_Part([f"d{n}" for n in name], np.array(layer, dtype=np.int64),
                       np.array(d, dtype=np.int64), np.full(len(blocks), -1), m))
    return parts


def _floor_ratio(max_abs: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """max_abs / floor: inf where the floor is 0 and max_abs is not, 1 where both are, NaN
    where there is no floor."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = max_abs / floor
    ratio[(floor == 0) & (max_abs == 0)] = 1.0
    return ratio


@dataclass(frozen=True)
class Divergence:
    """The divergence rows of one case x adapter pair (:data:`COLUMNS`) and its verdict."""

    rows: pd.DataFrame
    floor_factor: float | None = None  # the pair's :attr:`Tolerance.floor_factor`

    @property
    def passed(self) -> bool:
        """Every row :func:`within` tolerance."""
        return bool(_rows_within(self.rows, self.floor_factor).all())

    @property
    def verdict(self) -> str:
        return PASS if self.passed else DIVERGED


def divergence(case: Case, adapter: str, out: Outputs, ref: Outputs, tol: Tolerance,
               floor: Outputs | None = None) -> Divergence:
    """The rows of one pair: ``out`` (the adapter's outputs) against ``ref`` (the float64
    reference), with ``floor`` (the noise-floor reference) for the noise_floor column."""
    return _divergence(case, adapter, _parts(case, out, ref, floor, tol), tol, FREE)


def step_divergence(case: Case, adapter: str, layer: int, y: np.ndarray, ref_y: np.ndarray,
                    floor_y: np.ndarray | None, tol: Tolerance) -> Divergence:
    """Step-local rows (mode ``step``) of one layer: ``y`` [B, T, D·O], each step predicted by
    the adapter from the reference's state before it (:mod:`harness.steplocal`), against the
    reference's y of that layer ``ref_y``; ``floor_y``: the noise-floor reference's step
    predictions. One row per direction and t, the metrics of the free rows."""
    D, F, B, T = case.num_directions, case.out_size, case.batch, case.seq_len
    shape = (B, T, D, F)
    m = _over((0, 3), y.reshape(shape), ref_y.reshape(shape),
              None if floor_y is None else floor_y.reshape(shape), case.dtype, tol)  # [T, D]
    dirs = np.asarray(case.directions, dtype=np.int64)
    part = _Part(["y"] * (D * T), np.full(D * T, layer), np.repeat(dirs, T),
                 np.tile(np.arange(T), D), {k: v.T.ravel() for k, v in m.items()})
    return _divergence(case, adapter, [part], tol, STEP)


def _divergence(case: Case, adapter: str, parts: list[_Part], tol: Tolerance,
                mode: str) -> Divergence:

    def cat(get) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    m = {k: cat(lambda p, k=k: p.metrics[k]).astype(np.float64) for k in METRICS}
    n = len(m["max_abs"])
    data: dict = {"case": np.full(n, case.name, dtype=object),
                  "adapter": np.full(n, adapter, dtype=object),
                  "mode": np.full(n, mode, dtype=object),
                  "output": np.array([o for p in parts for o in p.output], dtype=object),
                  "layer": cat(lambda p: p.layer).astype(np.int64)}
    for label in ("direction", "t"):  # -1: missing (pandas' nullable integers)
        v = cat(lambda p, label=label: getattr(p, label)).astype(np.int64)
        data[label] = pd.arrays.IntegerArray(v, v < 0)
    data.update(m)
    data["floor_ratio"] = _floor_ratio(m["max_abs"], m["noise_floor"])
    data["atol"], data["rtol"] = np.full(n, float(tol.atol)), np.full(n, float(tol.rtol))
    ok = within(m["tol_ratio"], data["floor_ratio"], tol.floor_factor)
    data["verdict"] = np.where(ok, PASS, DIVERGED).astype(object)
    return Divergence(pd.DataFrame({k: data[k] for k in COLUMNS}, copy=False), tol.floor_factor)


# Reading rows ----------------------------------------------------------------------------------

def diverged(verdicts: pd.Series) -> pd.Series:
    """Which rows are beyond tolerance, from their ``verdict`` column: the verdict
    :func:`divergence` gave them, which rows read back from a report keep (its
    ``divergence.csv`` keeps the ratios to 6 digits only)."""
    return verdicts == DIVERGED


def worst(rows: pd.DataFrame | None) -> pd.Series | None:
    """The row furthest beyond (or closest to) its tolerance (the first of equals; NaN ratios
    skipped), or None."""
    if rows is None or rows.empty or rows["tol_ratio"].isna().all():
        return None
    return rows.loc[rows["tol_ratio"].idxmax()]


def where(row: pd.Series) -> str:
    """A row's place in words, e.g. ``y L1 d0 t=3``, ``dW_f L0 d1``, ``dx L0 t=2``, ``y L0 d0
    t=1 (step)`` (a missing t or direction, empty or negative as read back from a CSV, is left
    out)."""
    def known(v) -> bool:
        return not pd.isna(v) and v >= 0

    d = f" d{int(row['direction'])}" if known(row["direction"]) else ""
    t = f" t={int(row['t'])}" if known(row["t"]) else ""
    step = " (step)" if row.get("mode") == STEP else ""  # a step-local row
    return f"{row['output']} L{int(row['layer'])}{d}{t}{step}"


def first_divergence(rows: pd.DataFrame | None) -> pd.Series | None:
    """The earliest diverging y row (lowest t, then layer, then direction), or else the first
    diverging row of another output; None when no row diverged. Free-running rows only: they
    alone decide a verdict (:func:`pair_verdict`), a step-local row beyond tolerance is named
    in the reason."""
    if rows is None:
        return None
    bad = of_mode(rows[diverged(rows["verdict"])], FREE)
    return None if bad.empty else _first(bad)


def _first(bad: pd.DataFrame) -> pd.Series:
    """The earliest of rows beyond tolerance: the lowest y step (then layer, then direction),
    else the first row of another output."""
    y = bad[bad["output"] == "y"].sort_values(["t", "layer", "direction"], kind="stable")
    return (y if not y.empty else bad).iloc[0]
