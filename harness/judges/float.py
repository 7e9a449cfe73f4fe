"""Float pairs: each row within atol + rtol·|r| of the float64 reference (:class:`FloatJudge`);
in a lower-precision case also within k x the noise floor, with step-local rows where the pair
did not pass (:class:`LowPrecisionJudge`; docs/equations.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness import compare
from harness.judges.base import Judge, Measured
from harness.judges.verdict import Figures

if TYPE_CHECKING:
    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared
    from harness.spec import Case

LOW_PRECISION = ("float32", "float16", "bfloat16")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


class FloatJudge(Judge):
    """A float64 pair: its rows against the float64 reference, by the tolerance alone."""

    kind = "float"

    def claims(self, case: Case, adapter: Adapter | None) -> bool:
        return True

    def measure(self, prep: Prepared, adapter: Adapter, out: Outputs) -> Measured:
        case = prep.case
        tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
        d = compare.divergence(case, adapter.name, out, prep.reference, tol, prep.noise_floor)
        notes = _join(adapter.gradient_note(case) or "", adapter.route_note(case) or "",
                      out.note, out.absent_note())
        if adapter.baseline:  # the NumPy reference beside a baseline computed on the GPU
            notes = _join(notes, f"judged against the float64 reference on {prep.baseline_on}")
        return Measured(d.rows, tol, Figures(), notes, d.passed)


class LowPrecisionJudge(FloatJudge):
    """A float32, float16 or bfloat16 pair: a row also passes within
    :data:`harness.compare.NOISE_FLOOR_FACTOR` x its noise floor (unless the case sets a
    tolerance for it: :func:`harness.compare.tolerance_for`); ``auto`` step mode adds
    step-local rows where it did not pass, as rounding amplified by the recurrence may be the
    cause."""

    kind = "low-precision"

    def claims(self, case: Case, adapter: Adapter | None) -> bool:
        return case.dtype in LOW_PRECISION

    def wants_steps(self, step_mode: str, case: Case, passed: bool) -> bool:
        return step_mode == "on" or (step_mode == "auto" and not passed)
