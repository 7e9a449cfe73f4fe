"""What compare's judges share (docs/judges.md, docs/compare.md). They judge a *pairing* of
``rnn-harness compare``: a shipped layer and the original's layer it is paired with, not a case
and an adapter. So the registry (:data:`harness.judges.JUDGES`, :func:`harness.judges.judge_for`),
which picks the judge of a run's pair, never picks them: compare names them itself
(:mod:`harness.models.comparison`). Each returns the core's :class:`Verdict`, its figures a
:class:`PairingFigures` that says how compare shows them, so that compare's table, report and
compare.json read every verdict alike, whatever judged it.

One rule says whether a verdict keeps its pairing from being the same (:func:`counts_against`):
anything but a pass does, except a verdict that was not run here (its runtime unavailable, not
applicable) and says why; the report shows that reason wherever the pairing is shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from harness.compare import NOT_APPLICABLE, PASS, UNAVAILABLE
from harness.judges.verdict import Figures, Verdict

# statuses of a verdict that could not be judged here: they say nothing against the pairing
NOT_RUN = (UNAVAILABLE, NOT_APPLICABLE)


@dataclass(frozen=True)
class PairingFigures(Figures):
    """What a compare judge measured, and how the report shows it: the base shows the status
    and reason alone."""

    def heading(self) -> str:
        """What the verdict is of, as the report names it (``weights``, ``outputs
        (onnxruntime)``)."""
        return "verdict"

    def cell(self, status: str) -> str:
        """The table's cell of the verdict."""
        return status

    def summary(self, status: str) -> str:
        """The final line's words for a verdict that counts against its pairing."""
        return f"{self.heading()} {status}"

    def lines(self) -> list[str]:
        """Lines the report shows under the verdict's reason (the printed report)."""
        return []

    def table(self) -> tuple[list[str], list[list[str]]] | None:
        """A table compare.md shows under the verdict: (headers, rows); None: none."""
        return None

    def record(self) -> dict[str, Any]:
        """compare.json's fields of the verdict beside its status and reason."""
        return {}


def not_run(v: Verdict) -> bool:
    """Whether the verdict could not be judged here (its runtime unavailable, not applicable)."""
    return v.status in NOT_RUN


def explained(v: Verdict) -> bool:
    """Whether the verdict's reason says something beyond its status."""
    reason = v.reason.strip()
    return bool(reason) and reason != v.status


def counts_against(v: Verdict) -> bool:
    """Whether ``v`` keeps its pairing from being the same: anything but a pass, except a
    verdict not run here whose reason says why (a verdict that cannot say why it was not run
    passes nothing)."""
    if v.status == PASS:
        return False
    return not (not_run(v) and explained(v))


class PairingJudge:
    """A judge of compare's pairings, named by compare (not in :data:`harness.judges.JUDGES`):
    ``kind`` is the verdicts' kind, ``figures`` what it measures. Subclasses give a ``judge``
    method of their own arguments, returning a :class:`Verdict`."""

    kind: ClassVar[str] = ""
    figures: ClassVar[type[PairingFigures]] = PairingFigures
