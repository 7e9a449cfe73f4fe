"""What :func:`harness.check` returns: frozen dataclasses read from the run's own result
(:class:`harness.results.RunResult`), never recomputed. A result is truthy when everything
passed, as Polygraphy's are."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness import compare, judges
from harness.results import PairResult, RunResult

# verdicts of a pair that fail a run (the run's exit code 1: RunResult.failed says the same)
FAILING = (compare.DIVERGED, compare.ERROR, compare.LOOKS_FIXED)


def _place(value: object) -> int | None:
    """A row's layer, direction or t as an int; None where the row has none (final states have
    no t, dx no direction)."""
    if value is None or pd.isna(value) or value < 0:
        return None
    return int(value)


@dataclass(frozen=True)
class Divergence:
    """One row of a pair's comparison (docs/cases.md, Reading a report): which output, layer,
    direction (0 forward, 1 reverse) and timestep, and how far from the float64 reference."""

    output: str  # y, h_n, c_n (gradient cases: dx, dh0, dc0, dW_i, ...)
    layer: int
    direction: int | None
    t: int | None  # None for the final states and parameter gradients
    max_abs: float
    max_rel: float
    tol_ratio: float  # max |a - r| / (atol + rtol |r|): over 1 is beyond the tolerance
    floor_ratio: float  # max_abs / the noise floor (NaN where there is none)
    atol: float
    rtol: float

    @classmethod
    def of_row(cls, row: pd.Series | None) -> Divergence | None:
        if row is None:
            return None
        return cls(output=str(row["output"]), layer=int(row["layer"]),
                   direction=_place(row["direction"]), t=_place(row["t"]),
                   max_abs=float(row["max_abs"]), max_rel=float(row["max_rel"]),
                   tol_ratio=float(row["tol_ratio"]), floor_ratio=float(row["floor_ratio"]),
                   atol=float(row["atol"]), rtol=float(row["rtol"]))

    def __str__(self) -> str:
        d = f" d{self.direction}" if self.direction is not None else ""
        t = f" t={self.t}" if self.t is not None else ""
        return f"{self.output} L{self.layer}{d}{t}"


@dataclass(frozen=True)
class PairCheck:
    """One case x adapter pair. ``verdict``: pass, DIVERGED, error, not applicable,
    unavailable, baseline (the float64 reference itself), known upstream bug, looks fixed.
    ``worst``: the free-running row closest to (or furthest beyond) its tolerance;
    ``first_divergence``: the earliest row beyond it (None when none is). Truthy unless the
    verdict fails a run (DIVERGED, error, looks fixed)."""

    case: str
    adapter: str
    verdict: str
    reason: str
    seconds: float
    worst: Divergence | None
    first_divergence: Divergence | None

    @classmethod
    def of_pair(cls, pair: PairResult) -> PairCheck:
        return cls(case=pair.case, adapter=pair.adapter, verdict=pair.status, reason=pair.reason,
                   seconds=pair.seconds, worst=Divergence.of_row(pair.worst),
                   first_divergence=Divergence.of_row(pair.first_diverging))

    @property
    def passed(self) -> bool:
        return self.verdict not in FAILING

    @property
    def compared(self) -> bool:
        """Whether outputs were compared (pass, DIVERGED, known upstream bug, looks fixed)."""
        return self.verdict in compare.COMPARED

    @property
    def worst_error(self) -> float:
        """The worst row's max abs error (NaN where nothing was compared)."""
        return self.worst.max_abs if self.worst is not None else math.nan

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        where = (f", first diverging at {self.first_divergence}" if self.first_divergence
                 else f", worst {self.worst} ({self.worst.max_abs:.2e})" if self.worst else "")
        why = f": {self.reason}" if self.reason else ""
        return f"{self.case}::{self.adapter} {self.verdict}{where}{why}"


@dataclass(frozen=True)
class CheckResult:
    """Every pair of a check, the case errors (a case that could not be prepared, or one blind
    to every plausible mistake: docs/cases.md, Blind spots), and the report folder when one was
    written (``out=``). Truthy when no pair failed, no case failed, and something was compared:
    a check that compared nothing (every pair unavailable or not applicable) tested nothing."""

    pairs: tuple[PairCheck, ...]
    case_errors: tuple[tuple[str, str], ...] = ()  # (case name, why), in case order
    report: Path | None = None
    # the run core's whole result (its divergence rows: ``run.divergence``); not compared
    run: RunResult | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of_run(cls, run: RunResult, report: Path | None = None) -> CheckResult:
        return cls(pairs=tuple(PairCheck.of_pair(p) for p in run.pairs),
                   case_errors=tuple(run.case_errors.items()), report=report, run=run)

    @property
    def passed(self) -> bool:
        return (not self.case_errors and all(p.passed for p in self.pairs)
                and any(p.compared for p in self.pairs))

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failed_pairs(self) -> tuple[PairCheck, ...]:
        return tuple(p for p in self.pairs if not p.passed)

    @property
    def rows(self) -> pd.DataFrame:
        """Every compared row of every pair (harness.judges.columns), as divergence.csv."""
        return self.run.divergence if self.run is not None else pd.DataFrame(
            columns=judges.columns())

    def pair(self, adapter: str, case: str | None = None) -> PairCheck:
        """The pair of ``adapter`` (and ``case``, needed when several cases ran)."""
        found = [p for p in self.pairs if p.adapter == adapter and case in (None, p.case)]
        if len(found) != 1:
            cases = sorted({p.case for p in found})
            raise KeyError(f"no pair of adapter {adapter!r}" + (f" and case {case!r}" if case
                                                                 else "")
                           if not found else
                           f"adapter {adapter!r} ran on several cases ({', '.join(cases)}): "
                           "name the case")
        return found[0]

    def __str__(self) -> str:
        counts: dict[str, int] = {}
        for p in self.pairs:
            counts[p.verdict] = counts.get(p.verdict, 0) + 1
        text = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no pairs"
        lines = [f"{'passed' if self else 'FAILED'}: {text}"]
        lines += [f"  {p}" for p in self.failed_pairs]
        lines += [f"  case {name}: {why}" for name, why in self.case_errors]
        if self.report is not None:
            lines.append(f"  report in {self.report}/")
        return "\n".join(lines)
