"""What every judge does (:class:`Judge`): claim the pairs of its kind, measure a pair that ran
(:class:`Measured`), and give the plain verdict of its rows and figures, the one rule the run
and ``merge`` both apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from harness import compare
from harness.judges import known
from harness.judges.verdict import Figures

if TYPE_CHECKING:
    import pandas as pd

    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared
    from harness.spec import Case


@dataclass
class Measured:
    """A pair measured by its judge: its ``rows``, the ``tolerance`` they were judged with
    (step-local rows use it too), the judge's ``figures``, ``notes`` for the reason, and whether
    every free-running row ``passed``."""

    rows: pd.DataFrame
    tolerance: compare.Tolerance
    figures: Figures
    notes: str
    passed: bool


class Judge:
    """One kind of pair's judge. A new kind is a subclass registered in
    :data:`harness.judges.JUDGES` (:func:`harness.judges.register`); what it measures beyond the
    rows is a :class:`Figures` subclass (:attr:`figures`), which run.json keeps and ``merge``
    reads back."""

    kind: ClassVar[str] = ""
    figures: ClassVar[type[Figures]] = Figures
    # what merge's refusal names beside the rows as the source of the status it derived
    evidence: ClassVar[str] = "the case's recorded spec"

    def claims(self, case: Case, adapter: Adapter | None) -> bool:
        """Whether this judge judges the pair (``adapter`` None: one this installation does
        not know, as a shard of another installation may hold)."""
        raise NotImplementedError

    def measure(self, prep: Prepared, adapter: Adapter, out: Outputs) -> Measured:
        """The rows and figures of a pair that ran."""
        raise NotImplementedError

    def plain(self, rows: pd.DataFrame, case: Case, adapter: str, figures: Figures
              ) -> tuple[str, str]:
        """(PASS or DIVERGED, why) from the rows (free-running; step-local ones explain, never
        change it: :func:`harness.compare.pair_verdict`) and the figures, before any known-bug
        reading."""
        floor_factor = compare.tolerance_for(case, adapter).floor_factor
        return compare.pair_verdict(compare.of_mode(rows, compare.FREE),
                                    compare.of_mode(rows, compare.STEP), floor_factor)

    def wants_steps(self, step_mode: str, case: Case, passed: bool) -> bool:
        """Whether the run adds step-local rows (:mod:`harness.steplocal`): ``on``: yes."""
        return step_mode == "on"

    def unexplained(self, prep: Prepared, adapter: Adapter, out: Outputs,
                    tol: compare.Tolerance) -> str | None:
        """Why a registry entry's reading of the weights does not explain a DIVERGED pair
        (:func:`harness.judges.known.unexplained`)."""
        return known.unexplained(prep, adapter, out, tol)
