"""What a judge says of a pair (:class:`Verdict`) and what it measured beyond the rows
(:class:`Figures`), as data that run.json keeps and ``merge`` reads back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pandas as pd

    from harness.spec import Case


class Disagrees(Exception):
    """A recorded pair whose figures or decision do not agree with its rows, its case or the
    registry: ``merge`` names the shard (the message follows ``pair CASE::ADAPTER``)."""


@dataclass(frozen=True)
class KnownBugReading:
    """A known upstream bug applied to a pair: ``upstream`` (owner/repo#N), ``declared`` by the
    case's ``expected:`` (else the registry's entry), ``unexplained``: why the entry's reading
    of the weights does not reproduce the outputs ("": it does, or it has no reading), and
    ``crash``: the pair compared nothing, its framework died as the bug says (True) or the
    declared crash did not come (False); None: the pair compared outputs."""

    upstream: str
    declared: bool
    unexplained: str = ""
    crash: bool | None = None

    def record(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"upstream": self.upstream,
                               "source": "expected" if self.declared else "registry"}
        if self.unexplained:
            doc["unexplained"] = self.unexplained
        if self.crash is not None:
            doc["crash"] = self.crash
        return doc

    @classmethod
    def from_record(cls, doc: Any) -> KnownBugReading:
        if (not isinstance(doc, dict) or not isinstance(doc.get("upstream"), str)
                or doc.get("source") not in ("expected", "registry")
                or not isinstance(doc.get("unexplained", ""), str)
                or doc.get("crash") not in (None, True, False)):
            raise Disagrees("has a malformed known_bug record in run.json (expected "
                            "{upstream, source: expected|registry, unexplained?, crash?})")
        return cls(doc["upstream"], doc["source"] == "expected", doc.get("unexplained", ""),
                   doc.get("crash"))


@dataclass(frozen=True)
class ScriptQuestion:
    """The question a reproducer's script answers: its ``key`` in
    :data:`harness.repro.questions.QUESTIONS` and the ``data`` the script needs for it."""

    key: str = "tolerance"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Figures:
    """What a judge measured beyond the rows, for the verdict and the readers of a report. The
    base holds nothing: a pair judged by its rows alone."""

    key: ClassVar[str | None] = None  # the pair's run.json field that keeps them
    plots: ClassVar[tuple[str, ...]] = ()  # extra plots the report draws always (report/plots.py)
    # those plots in the report's words: what they show and what the pairs are called, as in
    # "the quantization cost of the 2 quantized pairs"
    always_plot_words: ClassVar[tuple[str, str]] = ("the extra plots", "pair")
    # divergence.csv columns the judge's rows carry beyond harness.compare.COLUMNS (every
    # report has the columns of every judge: harness.judges.columns)
    columns: ClassVar[tuple[str, ...]] = ()

    def record(self) -> dict[str, Any] | None:
        """The figures as run.json keeps them under :attr:`key`; None: nothing to keep."""
        return None

    @classmethod
    def from_record(cls, record: Any) -> Figures:
        """The figures read back from run.json (:class:`Disagrees` where malformed)."""
        return cls()

    def read_back(self, rows: pd.DataFrame) -> Figures:
        """The figures as the pair's rows read back from divergence.csv give them again
        (:class:`Disagrees` where they do not agree): what ``merge`` judges with."""
        return self

    def worst_text(self, worst: pd.Series, fmt: Callable[[float], str]) -> str:
        """The summary's cell for the pair's worst free-running row."""
        return f"{fmt(worst['max_abs'])} ({worst['output']}, {worst['tol_ratio']:.2g}x tol)"

    def script(self, case: Case) -> ScriptQuestion:
        """The question a reproducer's script answers (harness/repro/questions.py): the
        tolerance question, unless the figures say another."""
        return ScriptQuestion()


@dataclass
class Verdict:
    """A pair judged: its ``status`` (the words reports show: :mod:`harness.compare`), the
    ``reason`` that says why, the divergence ``rows``, the judge's ``figures`` and the
    known-bug reading it was read with (``known``; None: none applied). ``checked``: the
    registry's entries of the adapter (their ``upstream`` ids) that were checked and did not
    apply, recorded so that ``merge`` can tell a decision removed from one never taken.
    ``kind``: the judge's (:mod:`harness.judges`)."""

    kind: str
    status: str
    reason: str = ""
    rows: pd.DataFrame | None = None
    figures: Figures = field(default_factory=Figures)
    known: KnownBugReading | None = None
    checked: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The verdict's fields of the pair's run.json entry beside its status and reason:
        the figures (under their key) and the known-bug decision, from which ``merge`` derives
        the status again."""
        doc: dict[str, Any] = {}
        kept = self.figures.record()
        if self.figures.key and kept:
            doc[self.figures.key] = kept
        if self.known is not None:
            doc["known_bug"] = self.known.record()
        elif self.checked:
            doc["known_bug"] = {"checked": list(self.checked), "applies": False}
        return doc
