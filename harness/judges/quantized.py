"""Quantized pairs (:mod:`harness.quantization`, docs/quantization.md): the kernel question in
output steps against the integer-aware reference, and the cost question, the SQNR over y
against an ideal quantization's (:class:`CostFigures`), answered by one rule
(:func:`harness.quantization.cost_status`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from harness import compare, quantization
from harness.judges.base import Judge, Measured
from harness.judges.verdict import Disagrees, Figures, ScriptQuestion

if TYPE_CHECKING:
    import pandas as pd

    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared
    from harness.spec import Case


def _db(v: float | None) -> float:
    return math.inf if v is None else float(v)


@dataclass(frozen=True)
class CostFigures(Figures):
    """What quantizing cost: the SQNR (dB) over y against the float64 reference and an ideal
    quantization's of the same scheme (inf: no error), and the largest error against the
    float64 reference in output units (NaN: not measured)."""

    key: ClassVar[str] = "quantization"
    plots: ClassVar[tuple[str, ...]] = ("cost",)
    always_plot_words: ClassVar[tuple[str, str]] = ("the quantization cost", "quantized pair")
    columns: ClassVar[tuple[str, ...]] = quantization.COST_COLUMNS  # on a quantized pair's y rows

    sqnr_db: float = math.inf
    ideal_sqnr_db: float = math.inf
    max_abs: float = math.nan

    def record(self) -> dict[str, float | None]:
        """run.json's ``quantization`` (None: infinite)."""
        return {k: (round(v, 4) if math.isfinite(v) else None)
                for k, v in (("sqnr_db", self.sqnr_db), ("ideal_sqnr_db", self.ideal_sqnr_db))
                } | ({"max_abs": float(f"{self.max_abs:.4g}")} if math.isfinite(self.max_abs)
                     else {})

    @classmethod
    def from_record(cls, record: Any) -> CostFigures:
        if (not isinstance(record, dict) or "sqnr_db" not in record
                or "ideal_sqnr_db" not in record):
            raise Disagrees("has quantization rows (sqnr_db) but no SQNR record in run.json "
                            "(quantization: {sqnr_db, ideal_sqnr_db})")
        biggest = record.get("max_abs")
        return cls(_db(record["sqnr_db"]), _db(record["ideal_sqnr_db"]),
                   math.nan if biggest is None else float(biggest))

    def read_back(self, rows: pd.DataFrame) -> CostFigures:
        """The SQNR over y the rows' cost columns give again
        (:func:`harness.quantization.sqnr_of_rows`), which the record must agree with."""
        given = quantization.sqnr_of_rows(rows)
        if given.missing:
            raise Disagrees(f"is a quantized pair (its case has quantization:), but "
                            f"{given.missing} of its y rows in divergence.csv have no SQNR and "
                            "RMSE (sqnr_db, rmse_steps): the shard was changed after it ran")
        recorded = None if math.isinf(self.sqnr_db) and self.sqnr_db > 0 else self.sqnr_db
        if not given.allows(recorded):
            shown = "inf" if recorded is None else f"{recorded:.4g}"
            bound = "" if given.exact else "at least "
            raise Disagrees(f"has an SQNR over y of {shown} dB in run.json, but its "
                            f"divergence.csv rows give {bound}{given.db:.4g} dB: the shard was "
                            "changed after it ran")
        return replace(self, sqnr_db=given.db) if given.exact else self

    def worst_text(self, worst: pd.Series, fmt: Callable[[float], str]) -> str:
        """The worst row in output steps against the integer-aware reference, then the cost in
        plain units: dB below an ideal quantization, the largest error against float64."""
        text = (f"{fmt(worst['max_abs'])} ({worst['output']}, {worst['tol_ratio']:.2g}x of "
                f"{quantization.K_STEPS:g} steps against the integer-aware reference)")
        cost = []
        record = self.record()
        sqnr, ideal = record.get("sqnr_db"), record.get("ideal_sqnr_db")
        if sqnr is not None and ideal is not None:
            below = ideal - sqnr
            cost.append(f"{below:.1f} dB below the ideal" if below >= 0.05 else
                        f"{-below:.1f} dB above the ideal" if below <= -0.05 else "as the ideal")
        if record.get("max_abs") is not None:
            cost.append(f"largest error {record['max_abs']:.3g} against float64")
        return text + (f"; cost: {', '.join(cost)}" if cost else "")

    def script(self, case: Case) -> ScriptQuestion:
        """The cost question, with its data for the reproducer's script: the SQNR over y and
        an ideal quantization's as the run recorded them (None: infinite), the rule's margin
        and the case's floor (:func:`harness.quantization.cost_status`)."""
        record = self.record()
        floor = case.quantization.min_sqnr_db if case.quantization is not None else None
        return ScriptQuestion("cost", {
            "sqnr_db": record.get("sqnr_db"), "ideal_sqnr_db": record.get("ideal_sqnr_db"),
            "margin_db": float(quantization.IDEAL_MARGIN_DB),
            "min_sqnr_db": None if floor is None else float(floor)})


class QuantizedJudge(Judge):
    """A quantized runtime's pair on a case with ``quantization:``; an adapter this
    installation does not know counts as one there (a shard may have blanked the cost columns:
    the kind is decided by the case and the registry, never by the rows)."""

    kind = "quantized"
    figures = CostFigures
    evidence = "SQNR record"

    def claims(self, case: Case, adapter: Adapter | None) -> bool:
        return case.quantization is not None and (adapter is None
                                                   or adapter.judged_quantized(case))

    def measure(self, prep: Prepared, adapter: Adapter, out: Outputs) -> Measured:
        q = quantization.judge(prep.case, adapter.name, out, out.quantized, prep.inputs,
                               prep.canonical, prep.reference)
        notes = "; ".join(r for r in (q.reason, out.note, out.absent_note()) if r)
        tol = compare.Tolerance(atol=float(q.rows["atol"].max()) if len(q.rows) else 0.0,
                                rtol=0.0)
        return Measured(q.rows, tol, CostFigures(q.sqnr_db, q.ideal_sqnr_db, q.max_abs), notes,
                        q.status == compare.PASS)

    def plain(self, rows: pd.DataFrame, case: Case, adapter: str, figures: Figures
              ) -> tuple[str, str]:
        """The kernel question from the rows' output steps, then the cost question from the
        figures (the words are the measurement's: :func:`harness.quantization.judge`)."""
        verdict, _ = compare.pair_verdict(compare.of_mode(rows, compare.FREE),
                                          compare.of_mode(rows, compare.STEP), None)
        cost = figures if isinstance(figures, CostFigures) else CostFigures()
        total = None if math.isinf(cost.sqnr_db) and cost.sqnr_db > 0 else cost.sqnr_db
        ideal = None if math.isinf(cost.ideal_sqnr_db) else cost.ideal_sqnr_db
        status, _ = quantization.cost_status(case, verdict, total, ideal)
        return status, ""

    def wants_steps(self, step_mode: str, case: Case, passed: bool) -> bool:
        return False  # a step-local row would be judged against the float reference

    def unexplained(self, prep: Prepared, adapter: Adapter, out: Outputs,
                    tol: compare.Tolerance) -> str | None:
        return None  # no registry reading is a quantized kernel's
