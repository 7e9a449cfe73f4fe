"""The shipped-outputs verdict of a ``.tflite`` layer (docs/compare.md), given by the
shipped-outputs judge (:mod:`harness.judges.shipped`): the file run as it is in the LiteRT
interpreter (:mod:`harness.models.tflite_run`). A float file is judged by the run's verdict
rules against the float64 reference on the original's weights; a quantized one as a quantized
runtime is (:func:`harness.quantization.judge`): within k output steps of the integer-aware
reference on the file's own grids, and its SQNR over y (dB) against the float64 reference on
the original's weights no more than 6 dB below an ideal quantization of those weights."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.compare import UNAVAILABLE
from harness.judges.shipped import ShippedFigures
from harness.judges.verdict import Verdict

if TYPE_CHECKING:
    from harness.data import Inputs
    from harness.models.layers import Layer


@dataclass(frozen=True)
class TfliteFigures(ShippedFigures):
    """:class:`ShippedFigures` with a quantized file's SQNR over y and an ideal quantization's
    (dB; inf: no error)."""

    sqnr_db: float = math.nan
    ideal_sqnr_db: float = math.nan
    exact: str = ""

    def cell(self, status: str) -> str:
        if math.isnan(self.sqnr_db):
            return super().cell(status)
        return (f"{status} ({self.adapter}; SQNR {self.sqnr_db:.1f} dB, ideal "
                f"{self.ideal_sqnr_db:.1f} dB)")

    def record(self) -> dict[str, Any]:
        out = super().record()
        for k in ("sqnr_db", "ideal_sqnr_db"):
            v = getattr(self, k)
            if not math.isnan(v):
                out["figures"][k] = round(v, 4) if math.isfinite(v) else None
        if self.exact:
            out["integer_reference"] = self.exact
        return out


def tflite_verdict(kind: str, original: Layer, shipped: Layer, inputs: Inputs | None,
                   note: str) -> Verdict:
    """The outputs verdict of the shipped ``.tflite`` layer ``shipped``."""
    from harness import compare, quantization
    from harness.data import generate
    from harness.errors import Unavailable
    from harness.models.tflite_run import ShippedTflite, bit_exact, interpret, zero_states
    from harness.prepare import reference_and_floor

    op = shipped.tflite
    adapter = ShippedTflite(op)
    if not op.whole:
        return Verdict(kind, UNAVAILABLE, f"the {op.op} op sits inside a larger model: "
                       "not run here (the file is run only where it is the layer)",
                       figures=TfliteFigures(note=note))
    try:
        adapter.check_available()
    except Unavailable as exc:
        return Verdict(kind, UNAVAILABLE, str(exc), figures=TfliteFigures(note=note))
    inputs = zero_states(inputs if inputs is not None else generate(shipped.case))
    if op.quantized is None:
        from harness.judges.shipped import SHIPPED_OUTPUTS

        return SHIPPED_OUTPUTS.judge(original, shipped, inputs, adapter=adapter, note=note)
    B, T = inputs.x.shape[:2]
    case = shipped.case.model_copy(update={"batch": B, "seq_len": T})
    ref, _ = reference_and_floor(original.case.model_copy(update={"batch": B, "seq_len": T}),
                                 original.canonical, inputs)
    y = interpret(op.model, inputs.x)
    out = adapter._run(case, {}, inputs)
    out.y = y
    q = quantization.judge(case, adapter.name, out, op.quantized, inputs, original.canonical,
                           ref)
    exact = bit_exact(op, inputs.x, y) if op.scheme == "int8" else ""
    reason = "; ".join(r for r in (q.reason, exact, note) if r)
    first = compare.first_divergence(q.rows)
    where = compare.where(first) if first is not None else ""
    return Verdict(kind, q.status, reason, q.rows, TfliteFigures(
        adapter=adapter.name, tol_ratio=float(q.rows["tol_ratio"].max()),
        max_abs=q.max_abs, first=where, note=note, inputs=inputs, model=op.model,
        got={"y": y}, sqnr_db=q.sqnr_db, ideal_sqnr_db=q.ideal_sqnr_db, exact=exact))
