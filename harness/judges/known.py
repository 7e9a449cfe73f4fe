"""The known-bug reading on top of every judge (:mod:`harness.known_bugs`, a case's
``expected:``): decided once, where the pair is judged (:func:`decide`, :func:`crashed`), kept
on the pair (:class:`KnownBugReading`, run.json ``known_bug``), and applied to a plain verdict
by one function (:func:`apply`), which the run and ``merge`` both call. ``merge`` checks a
recorded decision against the case's ``expected:`` and the registry (:func:`stored`) instead of
drawing the weights again."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness import compare, known_bugs
from harness.judges.verdict import Disagrees, KnownBugReading
from harness.known_bugs import KnownBug, Weights
from harness.spec import Case, Signature

if TYPE_CHECKING:
    import pandas as pd

    from harness.adapters.base import Adapter
    from harness.data import Outputs
    from harness.prepare import Prepared


def _entry(case: Case, adapter: str, upstream: str) -> KnownBug | None:
    """The registry's entry of this adapter and bug whose condition on the case holds."""
    return next((b for b in known_bugs.for_adapter(adapter)
                 if b.upstream == upstream and b.on_case(case)), None)


def decide(status: str, case: Case, adapter: str, weights: Weights | None,
           unexplained: Callable[[], str | None] | None = None,
           rows: pd.DataFrame | None = None, reason: str = "") -> KnownBugReading | None:
    """The reading of a compared pair with plain ``status`` (PASS or DIVERGED): the case's own
    ``expected:`` entry for the adapter, else the registry's entry that applies to the case,
    these ``weights`` and the installed versions; None where none does. For a DIVERGED pair
    under a registry entry, ``unexplained()`` says why the entry's reading of the weights does
    not reproduce the outputs; under a declared entry with a ``signature``, :func:`mismatch`
    says where the pair's ``rows`` and ``reason`` differ from it."""
    if status not in (compare.PASS, compare.DIVERGED):
        return None
    declared = case.expected.get(adapter)
    if declared is not None:
        why = (mismatch(declared.signature, rows, reason)
               if declared.signature is not None and status == compare.DIVERGED else None)
        return KnownBugReading(declared.upstream, True, why or "")
    entry = known_bugs.known_bug(case, adapter, weights)
    if entry is None:
        return None
    why = unexplained() if unexplained is not None and status == compare.DIVERGED else None
    return KnownBugReading(entry.upstream, False, why or "")


def mismatch(signature: Signature, rows: pd.DataFrame | None, reason: str) -> str | None:
    """Where a DIVERGED pair differs from a declared ``signature``, in words, or None: its
    first diverging y row must be at ``first_step``, and its reason must hold each of ``says``
    word for word (a changed grid, scale or op is another divergence, not the declared bug)."""
    wrong = []
    if signature.first_step is not None:
        first = compare.first_divergence(rows)
        t = None if first is None or first["output"] != "y" else int(first["t"])
        if t != signature.first_step:
            at = ("no row diverges" if first is None
                  else f"it first diverges at {compare.where(first)}")
            wrong.append(f"the signature's first diverging step is t={signature.first_step}, "
                         f"but {at}")
    missing = [s for s in signature.says or () if s not in reason]
    if missing:
        wrong.append("the pair's reason does not say " + "; ".join(repr(s[:200]) for s in missing))
    return "; ".join(wrong) or None


def registry(adapter: str) -> tuple[str, ...]:
    """The ``upstream`` ids of the registry's entries of ``adapter``, sorted: a compared pair
    of such an adapter records its decision either way (:attr:`Verdict.checked` where none
    applied)."""
    return tuple(sorted({b.upstream for b in known_bugs.for_adapter(adapter)}))


def crashed(case: Case, adapter: str, upstream: str, came: bool) -> KnownBugReading:
    """The reading of a pair whose adapter declared a known upstream crash (``came``) or
    found the declared crash gone: it compared nothing."""
    declared = case.expected.get(adapter)
    return KnownBugReading(upstream, declared is not None and declared.upstream == upstream,
                           crash=came)


def unexplained(prep: Prepared, adapter: Adapter, out: Outputs,
                tol: compare.Tolerance) -> str | None:
    """Why the registry's known bug of a DIVERGED pair does not explain its outputs, or None
    (it does, or it has no reading to check): the reference on the weights as the buggy
    framework reads them must reproduce them within the pair's tolerance. The gradients of the
    blocks that reading changes are left out: the framework has no such parameter."""
    from harness.params import Canonical
    from harness.prepare import reference_and_floor

    case = prep.case
    if case.expected.get(adapter.name) is not None:
        return None  # the case's own declaration: taken as it says
    bug = known_bugs.known_bug(case, adapter.name, prep.canonical.tensors)
    if bug is None or bug.reading is None:
        return None
    weights = bug.reading(case, prep.canonical.tensors)
    changed = {k.rsplit("/", 1)[1] for k, v in weights.items()
               if v is not prep.canonical.tensors[k]}
    ref, floor = reference_and_floor(case, Canonical(weights), prep.inputs)
    d = compare.divergence(case, adapter.name, out, ref, tol, floor)
    rows = d.rows[~d.rows["output"].isin({f"d{name}" for name in changed})]
    f = compare.first_divergence(rows)
    if f is None:
        return None
    return (f"on the weights as {bug.upstream} reads them the outputs still differ, first at "
            f"{compare.where(f)} ({f['tol_ratio']:.3g}x tolerance)")


def apply(status: str, reason: str, case: Case, adapter: str,
          reading: KnownBugReading | None) -> tuple[str, str]:
    """A compared pair's (status, reason) read with ``reading``: DIVERGED as expected is
    KNOWN_BUG, which does not fail a run, unless the reading is unexplained (DIVERGED: another
    bug may hide behind it); PASS is LOOKS_FIXED, which fails a run, so that the stale
    expectation goes. A crash reading keeps the adapter's own status and reason."""
    if reading is None or reading.crash is not None or status not in (compare.PASS,
                                                                       compare.DIVERGED):
        return status, reason
    upstream = reading.upstream
    link = known_bugs.link(upstream)
    named = f"{upstream} ({link})" if link else upstream
    entry = None if reading.declared else _entry(case, adapter, upstream)
    if status == compare.DIVERGED and reading.unexplained:
        return compare.DIVERGED, _join(f"known upstream bug {named} applies here but does not "
                                       f"explain the divergence: {reading.unexplained}", reason)
    if status == compare.DIVERGED:
        what = f": {entry.summary}" if entry else ""
        return compare.KNOWN_BUG, _join(f"known upstream bug {named}{what}", reason)
    fixed = (f"the bug looks fixed; remove expected.{adapter} from the case" if entry is None
             else entry.looks_fixed())
    return compare.LOOKS_FIXED, _join(f"expected DIVERGED (known upstream bug {named}) but "
                                      f"passes: {fixed}", reason)


def stored(doc: Any, case: Case, adapter: str) -> KnownBugReading | None:
    """A recorded decision read back for ``merge`` and checked against what it can check
    without the weights: a declared one is the case's ``expected:`` entry; a registry one an
    entry of this adapter whose condition on the case holds (its condition on the weights and
    the versions were the run's to check); none where the case declares one is a decision
    removed, and so is none for an adapter the registry holds entries of (the run records
    ``{checked: [...], applies: false}`` where none applied). :class:`Disagrees` otherwise."""
    declared = case.expected.get(adapter)
    entries = registry(adapter)
    if doc is None:
        if declared is not None:
            raise Disagrees(f"has no known_bug record in run.json, but the case's recorded spec "
                            f"declares expected.{adapter[:80]} ({declared.upstream[:80]})")
        if entries:
            raise Disagrees(f"has no known_bug record in run.json, but the registry "
                            f"(harness/known_bugs.py) holds {', '.join(entries)[:160]} for "
                            f"{adapter[:80]}: the run records whether one applies on every "
                            "compared pair of such an adapter, so the decision was removed")
        return None
    if isinstance(doc, dict) and doc.get("applies") is False:
        return _none_applied(doc, declared, adapter, entries)
    reading = KnownBugReading.from_record(doc)
    if reading.declared:
        if declared is None or declared.upstream != reading.upstream:
            raise Disagrees(f"is read as known upstream bug {reading.upstream[:80]!r} of the "
                            f"case's expected:, which the case's recorded spec does not declare")
    elif declared is not None:
        raise Disagrees("is read with a registry entry, but the case's recorded spec declares "
                        f"expected.{adapter[:80]}, which takes precedence")
    else:
        if _entry(case, adapter, reading.upstream) is None:
            raise Disagrees(f"is read as known upstream bug {reading.upstream[:80]!r}, which "
                            "the registry (harness/known_bugs.py) holds for no such adapter "
                            "and case")
    return reading


def _none_applied(doc: dict[str, Any], declared: Any, adapter: str,
                  entries: tuple[str, ...]) -> None:
    """A recorded decision that no registry entry applied: the entries it checked must be the
    registry's of the adapter, and the case must declare none (a declared one always
    applies)."""
    if set(doc) != {"checked", "applies"} or not isinstance(doc["checked"], list):
        raise Disagrees("has a malformed known_bug record in run.json (expected {checked: "
                        "[upstream ids], applies: false})")
    if declared is not None:
        raise Disagrees(f"records that no known bug applies, but the case's recorded spec "
                        f"declares expected.{adapter[:80]} ({declared.upstream[:80]})")
    if tuple(doc["checked"]) != entries:
        shown = ", ".join(map(str, doc["checked"]))[:160] or "none"
        raise Disagrees(f"records the registry entries {shown} as checked, but the registry "
                        f"(harness/known_bugs.py) holds {', '.join(entries)[:160] or 'none'} "
                        f"for {adapter[:80]}")


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
