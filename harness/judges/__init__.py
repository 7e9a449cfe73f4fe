"""Judges: one per kind of pair, each giving a typed :class:`~harness.judges.verdict.Verdict`
(status, reason, rows, figures) with the known-bug reading on top (:mod:`harness.judges.known`).

Which judge judges a pair is decided here alone (:func:`judge_for`), from the case and the
adapter; the run (:func:`judge`) and ``merge`` (:func:`rejudge`) ask it, and nothing that
reads a verdict asks what kind of pair it is: the verdict's figures say what it has (their
run.json field, plots, summary text, reproducer question). A new kind: a
:class:`~harness.judges.base.Judge` subclass (and its Figures) in a module of its own here,
registered in :data:`JUDGES` (docs/judges.md).

``rnn-harness compare``'s judges of a pairing of two model files live beside compare
(:mod:`harness.models.judges`) and are not in :data:`JUDGES`: a pairing is no case x adapter
pair, and compare names its judges itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from harness import compare
from harness.judges import known
from harness.judges.base import Judge, Measured
from harness.judges.bit_exact import BitExactJudge
from harness.judges.float import FloatJudge, LowPrecisionJudge
from harness.judges.quantized import CostFigures, QuantizedJudge
from harness.judges.verdict import Disagrees, Figures, Verdict

if TYPE_CHECKING:
    import pandas as pd

    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared
    from harness.spec import Case

__all__ = ["JUDGES", "CostFigures", "Disagrees", "Figures", "Judge", "Measured", "Verdict",
           "columns", "crashed", "judge", "judge_for", "ordered", "register", "rejudge"]

JUDGES: list[Judge] = [BitExactJudge(), QuantizedJudge(), LowPrecisionJudge(), FloatJudge()]
"""The judges, the first that claims a pair judging it (the bit-exact judge before the quantized
one, whose pairs it narrows); the float judge claims every pair."""


def register(new: Judge) -> Callable[[], None]:
    """Put ``new`` first in :data:`JUDGES`; returns what takes it out again."""
    JUDGES.insert(0, new)
    return lambda: JUDGES.remove(new)


def judge_for(case: Case, adapter: Adapter | None) -> Judge:
    """The judge of a pair: the first of :data:`JUDGES` that claims it (``adapter`` None: one
    this installation does not know)."""
    return next(j for j in JUDGES if j.claims(case, adapter))


def columns() -> list[str]:
    """divergence.csv's columns: :data:`harness.compare.COLUMNS` with the columns of every
    judge's figures (:attr:`Figures.columns`, each once) before ``verdict``, where the cost
    columns have always stood. Every report has them all, empty on the rows of other kinds, so
    that reports written before and after a judge came merge; the judges are taken last
    registered last (:data:`JUDGES` reversed), so that a new judge's columns come after those
    that reports already have."""
    extra: list[str] = []
    for j in reversed(JUDGES):
        extra += [c for c in j.figures.columns if c not in extra and c not in compare.COLUMNS]
    at = compare.COLUMNS.index("verdict")
    return compare.COLUMNS[:at] + extra + compare.COLUMNS[at:]


def ordered(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of any pairs with divergence.csv's :func:`columns` in their order (a column
    missing: empty), then any other column they have."""
    names = columns()
    return rows.reindex(columns=names + [c for c in rows.columns if c not in names])


StepRows = Callable[[compare.Tolerance], tuple["pd.DataFrame | None", str]]


def judge(prep: Prepared, adapter: Adapter, out: Outputs, *, step_mode: str = "off",
          step_rows: StepRows | None = None, read_known: bool = True) -> Verdict:
    """Judge a pair that ran: its judge measures it, step-local rows are added where the judge
    wants them (``step_rows(tolerance)``: the rows and a note), the plain verdict comes from
    the rows and figures (the rule ``merge`` applies again), and the known-bug reading goes on
    top (``read_known`` False: the plain verdict, as an attribution's reruns are judged)."""
    case = prep.case
    j = judge_for(case, adapter)
    m = j.measure(prep, adapter, out)
    rows, notes = m.rows, m.notes
    if step_rows is not None and j.wants_steps(step_mode, case, m.passed):
        import pandas as pd

        more, note = step_rows(m.tolerance)
        if more is not None:
            rows = pd.concat([rows, more], ignore_index=True)
        notes = "; ".join(n for n in (notes, note) if n)
    status, why = j.plain(rows, case, adapter.name, m.figures)
    reason = "; ".join(n for n in (notes, why) if n)
    reading, checked = None, ()
    if read_known:
        reading = known.decide(status, case, adapter.name, prep.canonical.tensors,
                               lambda: j.unexplained(prep, adapter, out, m.tolerance),
                               rows, reason)
        status, reason = known.apply(status, reason, case, adapter.name, reading)
        checked = known.registry(adapter.name) if reading is None else ()
    return Verdict(j.kind, status, reason, rows, m.figures, reading, checked)


def crashed(case: Case, adapter: Adapter, status: str, reason: str, upstream: str,
            came: bool) -> Verdict:
    """The verdict of a pair whose framework died as a known upstream bug says (``came``), or
    whose declared crash did not come: no rows, the decision kept for ``merge``."""
    return Verdict(judge_for(case, adapter).kind, status, reason,
                   known=known.crashed(case, adapter.name, upstream, came))


def rejudge(case: Case, adapter_name: str, adapter: Adapter | None, status: str,
            rows: pd.DataFrame | None, recorded: Mapping[str, Any]) -> Verdict | None:
    """A recorded pair judged again from its rows (divergence.csv), its recorded figures and
    known-bug decision (run.json: ``recorded``, the pair's entry), checked against the case's
    ``expected:`` and the registry: the verdict whose status the record must hold; None for a
    pair that compared nothing (no rows and no crash decision). :class:`Disagrees` where the
    record cannot be what the run wrote."""
    j = judge_for(case, adapter)
    compared = status in compare.COMPARED
    has_rows = rows is not None and not rows.empty
    if has_rows and not compared:
        raise Disagrees(f"is {status[:40]!r} in run.json but has divergence.csv rows: it "
                        "compared outputs")
    if not has_rows:
        doc = recorded.get("known_bug")
        if not compared:
            return None
        reading = known.stored(doc, case, adapter_name) if doc is not None else None
        if reading is None or reading.crash is None:
            raise Disagrees(f"is {status!r} in run.json but has no rows in divergence.csv")
        derived = compare.KNOWN_BUG if reading.crash else compare.LOOKS_FIXED
        return Verdict(j.kind, derived, known=reading)
    figures = j.figures.from_record(recorded.get(j.figures.key)).read_back(rows)
    reading = known.stored(recorded.get("known_bug"), case, adapter_name)
    if reading is not None and reading.crash is not None:
        raise Disagrees("has divergence.csv rows but a known crash's record: it compared "
                        "outputs")
    plain, why = j.plain(rows, case, adapter_name, figures)
    derived, _ = known.apply(plain, why, case, adapter_name, reading)
    checked = known.registry(adapter_name) if reading is None else ()
    return Verdict(j.kind, derived, "", rows, figures, reading, checked)
