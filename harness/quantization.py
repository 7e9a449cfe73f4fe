"""The yardstick of a quantized pair (docs/quantization.md): two questions, answered apart.

*Is the kernel right?* The float64 reference is run with the model's own quantization where the
kernel quantizes (:class:`Quantized`, through the reference's ``stored`` hook): the weights as
stored in the converted model (dequantized), each layer's input ``x``, the hidden state ``h``
(fed back and output) and the cell state ``c`` rounded to the grids the model declares, and
the model's output ``y`` to its output grid. The pair's rows compare the adapter with that
reference; a row passes within :data:`K_STEPS` steps of the output grid (``atol`` = k x step,
``rtol`` = 0).

*What does quantization cost?* Against the float64 reference on the original weights: per
``y`` row the SQNR (dB), the cosine and the RMSE in output steps (columns ``sqnr_db``,
``cosine``, ``rmse_steps``). The pair is DIVERGED when its SQNR over all of ``y`` is more than
:data:`IDEAL_MARGIN_DB` below what an ideal quantization of the same scheme gives (the harness's
own grids from the same calibration batches: :func:`ideal_model`), or below the case's
``min_sqnr_db``. So a converter that writes wrong scales cannot pass by agreeing with its own
file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from harness import compare
from harness.cost_rule import cost_said, sqnr_db
from harness.data import Inputs, Outputs, generate
from harness.grids import DynamicActivation, Grid, LayerGrids, QuantizedModel
from harness.params import Canonical, key, layer_dirs
from harness.reference.functions import Array, Precision
from harness.reference.layers import forward
from harness.reference.tape import Tape
from harness.spec import Case

K_STEPS = 2.0
"""k: a quantized pair's row passes within k steps of the output grid of the integer-aware
reference. One step: the kernel rounds its last result (``h``, then the output requantized)
to the grid where the reference rounds the same value computed in float64; the two differ
before rounding by the kernel's 16-bit gate and cell arithmetic (steps of 2^-12 .. 2^-15,
far below an int8 step), so a value within that of a rounding boundary lands one step off.
One more step: that one-step difference in ``h`` is fed back and may move the next step's
rounding once more (docs/quantization.md, "k")."""

READ_BACK_STEPS = 2.0 ** -8
"""How far a whole number of steps may read from the float32 outputs: a kernel's output
dequantized to float32, scale x (q - zero point), carries a rounding error of at most 2^-24 of
its value, under 2^-8 steps for a grid of up to 2^16 steps. A row is judged within
:data:`K_STEPS` plus this, so that a pair exactly k steps off is judged by k and not by
float32's last bit (one measured pair read 1.999999 steps, another 2.000001)."""

IDEAL_MARGIN_DB = 6.0
"""A pair whose SQNR is this far below an ideal quantization's of the same scheme (the
harness's own grids from the same calibration data) is DIVERGED: 6 dB is one bit, a grid twice
as coarse as it needs to be."""

COST_COLUMNS = ("sqnr_db", "cosine", "rmse_steps")


def int8_grid(lo: float, hi: float) -> Grid:
    """The affine int8 grid of a range (including 0), as TFLite's quantizer makes it."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    return Grid(scale, int(np.clip(np.rint(-128 - lo / scale), -128, 127)), -128, 127)


def int16_pow2_grid(bound: float) -> Grid:
    """The symmetric int16 grid TFLite gives an LSTM's cell state: a power-of-two range over
    ``bound``."""
    exponent = int(np.ceil(np.log2(max(bound, 2.0 ** -15))))
    return Grid(2.0 ** exponent / 32768.0, 0, -32768, 32767)


@dataclass(frozen=True)
class Quantized(Precision):
    """The float64 reference with an integer kernel's stores: ``stored`` rounds x, h and c of
    the current layer and direction to its grids (:meth:`at` picks them)."""

    grids: dict = field(default_factory=dict, hash=False, compare=False)
    where: str = ""

    def at(self, layer: int, direction: int) -> Quantized:
        return Quantized("float64", self.grids, f"{layer}/{direction}")

    def stored(self, what: str, a: Array) -> Array:
        grids = self.grids.get(self.where)
        grid = getattr(grids, what, None) if grids is not None else None
        return a if grid is None or a is None else grid.round(a)


@dataclass(frozen=True)
class DynamicQuantized(Quantized):
    """:class:`Quantized` whose products read their activation operand as a dynamic kernel
    does (:class:`DynamicActivation`): ``a`` rounded to the grid of its own range, times the
    weights as stored."""

    activations: DynamicActivation = field(default_factory=DynamicActivation, hash=False,
                                           compare=False)

    def at(self, layer: int, direction: int) -> DynamicQuantized:
        return replace(self, where=f"{layer}/{direction}")

    def matmul(self, a: Array, b: Array) -> Array:
        return self.activations.round(a) @ b


def precision_of(model: QuantizedModel) -> Quantized:
    """The float64 reference's arithmetic with ``model``'s quantization."""
    if model.activations is not None:
        return DynamicQuantized("float64", model.grids, activations=model.activations)
    return Quantized("float64", model.grids)


def integer_reference(case: Case, model: QuantizedModel, inputs: Inputs) -> Outputs:
    """The float64 reference with ``model``'s quantization (the module text's first question)."""
    out = forward(case, Canonical(model.weights), inputs, precision_of(model))
    if model.output is not None:
        out.y = model.output.round(out.y)
        out.y_layers = None
    return out


def output_step(model: QuantizedModel, ref: Outputs) -> float:
    """The unit a pair is judged in: the output grid's step, or for a float output (dynamic
    range) the step of an int8 grid symmetric over the reference's y (max |y| / 127)."""
    if model.output is not None:
        return model.output.scale
    return float(np.max(np.abs(ref.y))) / 127.0 or 1.0


def calibration_inputs(case: Case) -> np.ndarray:
    """x [N, B, T, I]: ``calibration_batches`` batches of the case's own input distribution at
    its batch and sequence length, each from a seed of its own (never the compared batch)."""
    n = case.quantization.calibration_batches if case.quantization else 8
    return np.stack([generate(case.model_copy(update={"seed": case.seed + 1000 + k,
                                                      "gradients": False})).x
                     for k in range(n)])


def ideal_model(case: Case, canonical: Canonical, scheme: str, weight_qmax: int = 127
                ) -> QuantizedModel:
    """An ideal quantization of the same ``scheme`` by the harness itself: each gate's weights
    on a symmetric int8 grid over their own range; for int8, the activations on the grids TFLite
    derives from their ranges over the calibration batches (:func:`calibration_inputs`) run
    through the float64 reference: x and h affine int8, c int16 with a power-of-two range,
    the output y affine int8."""
    weights = {}
    for layer, d in layer_dirs(case):
        for name, block in canonical.block(layer, d).items():
            k = key(layer, d, name)
            if name[0] in "WR":
                s = float(np.max(np.abs(block))) / weight_qmax or 1.0
                weights[k] = np.rint(block / s) * s
            else:
                weights[k] = block
    if scheme != "int8":
        return QuantizedModel(scheme, weights)
    xs = calibration_inputs(case)
    batch = xs.reshape(-1, *xs.shape[2:])  # the batches side by side: one run
    lstm = case.cell_kind.has_cell_state
    zeros = np.zeros((case.num_layers * case.num_directions, batch.shape[0], case.hidden_size))
    big = case.model_copy(update={"batch": batch.shape[0], "seq_lengths": None})
    tapes: list[Tape] = []
    run = forward(big, canonical, Inputs(x=batch, h0=zeros, c0=zeros if lstm else None,
                                         seq_lengths=None), tapes=tapes)
    grids = {}
    layer_in = batch
    for layer in range(case.num_layers):
        y = run.y_layers[layer]
        for k, d in enumerate(case.directions):
            H = case.hidden_size
            h = y[..., k * H:(k + 1) * H]
            c = (float(np.max(np.abs(tapes[layer * case.num_directions + k].over_time("c"))))
                 if lstm else None)
            grids[f"{layer}/{d}"] = LayerGrids(
                x=int8_grid(float(layer_in.min()), float(layer_in.max())),
                h=int8_grid(float(h.min()), float(h.max())),
                c=int16_pow2_grid(c) if c is not None else None)
        layer_in = y
    return QuantizedModel(scheme, weights, grids,
                          output=int8_grid(float(run.y.min()), float(run.y.max())))


def cost_columns(case: Case, y: np.ndarray, ref_y: np.ndarray, step: float
                 ) -> dict[str, np.ndarray]:
    """Per y row (direction, then t: the row order of :func:`harness.compare.divergence`):
    SQNR (dB), cosine and RMSE / step of ``y`` against the float64 reference's ``ref_y``."""
    B, T = case.batch, case.seq_len
    D, F = case.num_directions, case.out_size
    a = y.reshape(B, T, D, F).transpose(2, 1, 0, 3).reshape(D * T, B * F)
    r = ref_y.reshape(B, T, D, F).transpose(2, 1, 0, 3).reshape(D * T, B * F)
    with np.errstate(divide="ignore", invalid="ignore"):
        cosine = np.sum(a * r, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(r, axis=1))
    return {"sqnr_db": sqnr_db(a, r, (1,)), "cosine": cosine,
            "rmse_steps": np.sqrt(np.mean((a - r) ** 2, axis=1)) / step}


@dataclass
class Judgement:
    """A quantized pair judged: its rows (the cost columns filled on the y rows), verdict and
    what the reason says."""

    rows: pd.DataFrame
    status: str
    reason: str
    sqnr_db: float
    ideal_sqnr_db: float
    # the largest |y - float64 reference| in output units: the cost as a reader weighs it
    max_abs: float = float("nan")
    # what a reproducer judges the kernel's y against (harness.models.tflite_repro):
    # integer_y, ideal_y (the two references' y), step, min_sqnr_db
    references: dict = field(default_factory=dict, repr=False)


def cost_status(case: Case, verdict: str, total: float | None, ideal: float | None
                ) -> tuple[str, list[str]]:
    """A quantized pair's status from the kernel question's ``verdict`` (its rows) and the
    cost question (the SQNR over y, ``total``, against an ideal quantization's, ``ideal``;
    None: infinite, no error), with what the reason says of the cost. The one rule: the run
    (:func:`judge`) and the quantized judge (:mod:`harness.judges.quantized`, for the run and
    ``merge`` alike) both call it."""
    floor = case.quantization.min_sqnr_db if case.quantization else None
    said = cost_said(total, ideal, IDEAL_MARGIN_DB, floor)  # which a reproducer runs too
    return (compare.DIVERGED if said else verdict), said


SQNR_READ_BACK_DB = 0.01
"""How far a quantized pair's SQNR over y in run.json (4 decimals) may lie from the one its
divergence.csv rows give again (6 significant digits a column): far above both roundings, far
below any margin a verdict turns on."""


@dataclass(frozen=True)
class RowsSqnr:
    """The SQNR over y that a quantized pair's rows give (:func:`sqnr_of_rows`): ``db`` (inf:
    no error), ``exact`` False where a row without error (its ``sqnr_db`` inf) keeps its
    signal's power to itself, which makes ``db`` a lower bound; ``missing``: y rows whose cost
    columns are blank or not numbers."""

    db: float
    exact: bool
    missing: int

    def allows(self, recorded: float | None) -> bool:
        """Whether an SQNR over y recorded for the pair (None: infinite) is the one the rows
        give: equal within :data:`SQNR_READ_BACK_DB`, or, where the rows give a lower bound,
        not below it."""
        total = np.inf if recorded is None else float(recorded)
        if np.isinf(self.db) or np.isinf(total):
            return total == self.db or (not self.exact and total >= self.db)
        if not self.exact:
            return total >= self.db - SQNR_READ_BACK_DB
        return abs(total - self.db) <= SQNR_READ_BACK_DB


def sqnr_of_rows(rows: pd.DataFrame) -> RowsSqnr:
    """The SQNR over y again from a quantized pair's y rows (:func:`cost_columns`): a row's
    noise power is its ``rmse_steps`` squared (every row holds B x F values in the same step)
    and its signal power that times 10^(``sqnr_db``/10); the SQNR over y is their sums' ratio,
    as :func:`sqnr_db` takes it over all of y at once. A row with no error (``rmse_steps`` 0)
    and a signal (``sqnr_db`` inf) tells no signal power: the sum then is a lower bound."""
    ys = rows[rows["output"] == "y"]

    def column(name: str) -> np.ndarray:
        if name not in ys.columns:
            return np.full(len(ys), np.nan)
        return pd.to_numeric(ys[name], errors="coerce").to_numpy(dtype=float)

    rmse, db = column("rmse_steps"), column("sqnr_db")
    noise = rmse ** 2
    silent = noise == 0  # y equals the reference there
    # a noisy row's SQNR is finite, or -inf (no signal); a silent row's inf, or blank (0/0)
    fits = np.where(silent, np.isposinf(db) | np.isnan(db), np.isfinite(db) | np.isneginf(db))
    missing = ~np.isfinite(rmse) | (rmse < 0) | ~fits
    ok = ~missing
    exact = not bool(np.any(ok & silent & np.isposinf(db)))
    with np.errstate(over="ignore", invalid="ignore"):
        signal = noise * 10.0 ** (db / 10.0)
    signal = np.where(ok & ~silent & np.isfinite(db), signal, 0.0)
    s, e = float(np.sum(signal)), float(np.sum(np.where(ok, noise, 0.0)))
    if e == 0.0:
        total = np.inf
    else:
        with np.errstate(divide="ignore"):
            total = float(10.0 * np.log10(s / e))
    return RowsSqnr(total, exact, int(np.sum(missing)))


def judge(case: Case, adapter: str, out: Outputs, model: QuantizedModel, inputs: Inputs,
          canonical: Canonical, reference: Outputs) -> Judgement:
    """Both questions of the module text for one pair."""
    kernel_ref = integer_reference(case, model, inputs)
    step = output_step(model, reference)
    tol = compare.Tolerance(atol=(K_STEPS + READ_BACK_STEPS) * step, rtol=0.0)
    d = compare.divergence(case, adapter, out, kernel_ref, tol)
    rows = d.rows.copy()
    ys = rows["output"] == "y"
    cost = cost_columns(case, out.y, reference.y, step)
    for name in COST_COLUMNS:
        rows.loc[ys.to_numpy(), name] = cost[name]
    total = float(sqnr_db(out.y, reference.y))
    # the same scheme: a dynamic kernel's run-time activation quantization is part of it
    ideal = replace(ideal_model(case, canonical, model.scheme, model.weight_qmax),
                    activations=model.activations)
    ideal_y = integer_reference(case, ideal, inputs).y
    ideal_total = float(sqnr_db(ideal_y, reference.y))
    worst = float(rows["max_abs"].max()) / step if not rows.empty else 0.0
    parts = [f"{model.scheme}: within {worst:.3g} output steps (step {step:.3g}) of the "
             f"integer-aware reference (pass within {K_STEPS:g}); SQNR {total:.1f} dB over y, "
             f"an ideal {model.scheme} quantization {ideal_total:.1f} dB"]
    status, said = cost_status(case, d.verdict, total, ideal_total)
    parts += said
    if d.verdict == compare.DIVERGED:
        f = compare.first_divergence(rows)
        if f is not None:
            parts.append(f"the kernel differs from the integer-aware reference first at "
                         f"{compare.where(f)}: {f['max_abs'] / step:.3g} steps")
    return Judgement(rows, status, "; ".join(parts), total, ideal_total,
                     float(np.max(np.abs(out.y - reference.y), initial=0.0)),
                     {"integer_y": kernel_ref.y, "ideal_y": ideal_y, "step": step,
                      "min_sqnr_db": (case.quantization.min_sqnr_db if case.quantization
                                      else None)})
