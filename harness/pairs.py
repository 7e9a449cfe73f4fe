"""One case x adapter pair run and judged: whether the case selects the adapter, the adapter
run (through an executor, :mod:`harness.isolation`) or its outputs taken from the prepared case,
every outcome a PairResult (a crash, a hang or a dead worker included), the judge's verdict with
step rows and a GPU divergence's attribution, and the pair's reproducer record."""

from __future__ import annotations

import traceback

import pandas as pd

from harness import attribution, compare, isolation, judges, steplocal
from harness.adapters import Adapter, get_adapter
from harness.adapters.reference import NoiseFloor, Reference
from harness.data import Outputs
from harness.errors import (
    HarnessError,
    KnownCrashGone,
    KnownUpstreamCrash,
    NotApplicable,
    Unavailable,
)
from harness.handed import Handed
from harness.prepare import Prepared
from harness.repro import record as repro_record
from harness.results import PairResult
from harness.run_options import STEP_MODES
from harness.spec import Case


def selected_by_case(case: Case, adapter: Adapter,
                     named: frozenset[str] | None = None) -> bool:
    """Whether ``case`` runs ``adapter``: its ``adapters:`` and ``exclude:`` lists, and for a
    named-only adapter (:attr:`Adapter.named_only`) whether it is named explicitly, on the
    command line (``named``; None: the caller named it) or in the case's ``adapters:``, or asked
    for by a key of the case (:meth:`Adapter.asked_for`: its ``shipped:`` file)."""
    wanted = set(case.adapters)
    unwanted = set(case.exclude)  # `exclude: [all]` excludes every adapter
    if (adapter.named_only is not None and named is not None and adapter.name not in named
            and adapter.name not in wanted and not adapter.asked_for(case)):
        return False
    return (("all" in wanted or adapter.name in wanted)
            and "all" not in unwanted and adapter.name not in unwanted)


def not_selected_reason(adapter: Adapter) -> str:
    why = f"{compare.NOT_SELECTED} (adapters/exclude)"
    if adapter.named_only is not None:
        why += f"; {adapter.name} runs when named: {adapter.named_only}"
    return why



def run_pair(prep: Prepared, adapter: Adapter, executor: isolation.Executor | None = None,
             step_mode: str = "auto", attribute: bool = True,
             named: frozenset[str] | None = None) -> PairResult:
    """Run one pair; every outcome, including a crash, a hang past the executor's timeout or a
    dead worker process, becomes a PairResult. ``executor``: where the adapter runs
    (:mod:`harness.isolation`; default: right here, no time limit). ``step_mode``: when to add
    step-local rows (``auto``: where the pair's judge wants them,
    :meth:`harness.judges.Judge.wants_steps`). ``attribute``: a DIVERGED pair of a GPU adapter
    that declares rerun variants is rerun with each to name the cause. ``named``: the adapters
    named on the command line (:func:`selected_by_case`; None: this one is named)."""
    executor = executor or isolation.InProcess()
    r = PairResult(prep.case.name, adapter.name, compare.ERROR)
    reason = _not_applicable(prep, adapter, named)
    if reason:
        r.status, r.reason = compare.NOT_APPLICABLE, reason
        return r
    out = _outputs(prep, adapter, executor, r)
    if out is None:  # r says why: unavailable, not applicable, a known bug, an error
        return r
    r.outputs = out
    if adapter.baseline and prep.baseline_on == "numpy":
        r.status, r.reason = compare.BASELINE, "the float64 reference all others are compared with"
        return r
    if step_mode not in STEP_MODES:
        raise HarnessError(f"expected one of {', '.join(STEP_MODES)}, got {step_mode!r}",
                           field="--step-mode")
    # the status from the rows, the figures and the case, as merge derives it from a shard's;
    # an attribution's reruns (attribute False) are judged as plain pairs
    r.verdict = judges.judge(prep, adapter, out, step_mode=step_mode, read_known=attribute,
                             step_rows=lambda tol: _step_rows(prep, adapter, executor, tol))
    r.rows, r.status, r.reason = r.verdict.rows, r.verdict.status, r.verdict.reason
    if (attribute and r.status in (compare.DIVERGED, compare.KNOWN_BUG)
            and adapter.device == "gpu" and adapter.reruns):
        r.attribution = _attribution(prep, adapter, executor)
    return r


def _not_applicable(prep: Prepared, adapter: Adapter,
                    named: frozenset[str] | None) -> str | None:
    """Why the pair is not run: the case does not select the adapter, or the adapter cannot run
    the case (the float64 reference beside a GPU baseline included); None: it runs."""
    if not selected_by_case(prep.case, adapter, named):
        return not_selected_reason(adapter)
    reason = adapter.not_applicable_reason(prep.case)
    if reason is None and type(adapter) is Reference and prep.baseline_on != "numpy":
        reason = adapter.beside_a_gpu_baseline(prep.case)
    return reason or None


def _outputs(prep: Prepared, adapter: Adapter, executor: isolation.Executor,
             r: PairResult) -> Outputs | None:
    """The adapter's outputs for the case, taken from the prepared case or run through
    ``executor``, with the seconds, the environment and what it handed its framework recorded in
    ``r``; None when there are none, ``r`` then saying why."""
    prepared = _prepared(prep, adapter)
    if prepared is not None:
        out, r.seconds = prepared
        r.environment = adapter.environment()  # computed by prepare, in this process
        return out
    try:
        reason = executor.unavailable_reason(adapter)
        r.environment = executor.environment(adapter)
    except isolation.PairFailure as exc:
        r.reason, r.detail = str(exc), exc.detail
        return None
    if reason:
        r.status, r.reason = compare.UNAVAILABLE, reason
        return None
    try:  # NaN/Inf: checked below, here in this process
        out, r.seconds = executor.call(adapter, prep.case, prep.canonical, prep.inputs,
                                       check_finite=False)
        r.handed = out.handed  # kept for an error row's reproducer (NaN or Inf below)
        adapter.check_finite(prep.case, out)
    except Exception as exc:  # an adapter crash is a result, not the end of the run
        _raised(r, prep.case, adapter, exc)
        return None
    return out


def _raised(r: PairResult, case: Case, adapter: Adapter, exc: Exception) -> None:
    """Record in ``r`` what the adapter's raising ``exc`` makes of the pair (called while
    ``exc`` is handled: an unexpected exception keeps its traceback)."""
    if isinstance(exc, isolation.PairFailure):  # timed out, worker died, or raised in a worker
        r.reason, r.detail = str(exc), exc.detail
    elif isinstance(exc, NotApplicable):
        r.status, r.reason = compare.NOT_APPLICABLE, str(exc)
    elif isinstance(exc, Unavailable):
        r.status, r.reason = compare.UNAVAILABLE, str(exc)
    elif isinstance(exc, KnownCrashGone):  # a declared crash that did not come
        r.verdict = judges.crashed(case, adapter, compare.LOOKS_FIXED, str(exc),
                                   exc.upstream, came=False)
        r.status, r.reason = r.verdict.status, r.verdict.reason
    elif isinstance(exc, KnownUpstreamCrash):  # declared by the adapter: a finding, not a failure
        r.verdict = judges.crashed(case, adapter, compare.KNOWN_BUG,
                                   f"known upstream bug {exc.upstream}: {exc}",
                                   exc.upstream, came=True)
        r.status, r.reason = r.verdict.status, r.verdict.reason
        r.handed = _handed_by(exc) or r.handed
    else:
        r.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        r.handed = _handed_by(exc) or r.handed
        r.detail = traceback.format_exc()


def _handed_by(exc: BaseException) -> Handed | None:
    """What an adapter that raised had handed its framework (``exc.handed``, set where the
    framework ran and the adapter then refused its answer: litert-torch's fixed-length model),
    for the row's reproducer; None where it says nothing."""
    handed = getattr(exc, "handed", None)
    return handed if isinstance(handed, Handed) else None


def _step_rows(prep: Prepared, adapter: Adapter, executor: isolation.Executor,
               tol: compare.Tolerance) -> tuple[pd.DataFrame | None, str]:
    """The step rows of the pair: the adapter run on each layer's derived step case
    (:mod:`harness.steplocal`) through the pair's executor (what they show is said by
    :func:`harness.compare.pair_verdict`: they never change the verdict). An adapter that
    cannot run a derived case (no initial states, ...) or fails on it adds none: the note
    returned says why."""
    case = prep.case
    B, T = case.batch, case.seq_len
    frames = []
    for sc in steplocal.step_cases(prep):
        reason = adapter.not_applicable_reason(sc.case)
        if reason:
            return None, f"step mode not applicable: {reason}"
        try:
            out, _ = executor.call(adapter, sc.case, sc.canonical, sc.inputs, check_finite=False)
        except NotApplicable as exc:
            return None, f"step mode not applicable: {exc}"
        except Exception as exc:  # PairFailure (timeout, dead worker) or a crash: one note
            return None, ("step mode failed: "
                          + f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        rows = compare.step_divergence(case, adapter.name, sc.layer, sc.scatter(out.y, B, T),
                                       prep.reference.y_layers[sc.layer],
                                       sc.scatter(sc.floor.y, B, T), tol).rows
        frames.append(rows)
    return (pd.concat(frames, ignore_index=True) if frames else None), ""


def _attribution(prep: Prepared, adapter: Adapter, executor: isolation.Executor) -> str:
    """Rerun the pair with each of the adapter's variants (each judged as its own pair) and
    say what the verdicts attribute the divergence to."""
    results = []
    for rerun in attribution.reruns(adapter.reruns):
        try:
            variant = get_adapter(rerun.adapter)
        except HarnessError as exc:  # a declared variant not in the registry
            results.append((rerun, str(exc)))
            continue
        results.append((rerun, run_pair(prep, variant, executor, attribute=False).status))
    return attribution.attribute(compare.DIVERGED, results)


def _prepared(prep: Prepared, adapter: Adapter) -> tuple[Outputs, float] | None:
    """The outputs of the reference adapters, which :func:`harness.prepare.prepare` computed
    already (a float64 case's noise floor is its reference), and the seconds that took; None
    for any other adapter, which runs."""
    if type(adapter) is Reference and prep.baseline_on == "numpy":  # else it runs: judged
        return prep.reference, prep.reference_seconds
    if type(adapter) is NoiseFloor:
        return prep.noise_floor, prep.noise_floor_seconds
    return None


def reproduce(prep: Prepared, adapter: Adapter) -> repro_record.ReproRecord:
    """Run one pair here and make its reproducer record whatever its verdict: ``rnn-harness
    repro`` (a passing pair's reproducer exits 0)."""
    return pair_repro(prep, adapter, run_pair(prep, adapter))


def pair_repro(prep: Prepared, adapter: Adapter, r: PairResult) -> repro_record.ReproRecord:
    """The pair's reproducer record: what the adapter handed its framework as it ran; for a
    known upstream bug whose pair did not run (an adapter its bug makes unavailable), what it
    would hand (``Adapter.hand``, which runs nothing), or None where it cannot say."""
    handed = r.handed
    if handed is None and r.status not in compare.COMPARED and r.status != compare.ERROR:
        try:
            native = (adapter.layout.to_native(prep.canonical, prep.case,
                                               adapter.native_dtype(prep.case))
                      if adapter.layout else prep.canonical.tensors)
            handed = adapter.hand(prep.case, native, prep.inputs)
        except Exception:  # noqa: BLE001  (no record: the README says there is none)
            handed = None
    return repro_record.make_record(prep, adapter, r, handed)
