"""Running case x adapter pairs: nothing lost when one adapter fails, events as it goes
(:mod:`harness.run_events`; :mod:`harness.progress` shows them)."""

from __future__ import annotations

import multiprocessing.connection
import time
import traceback
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pandas as pd

from harness import attribution, compare, isolation, judges, steplocal
from harness import blind as blind_check
from harness.adapters import Adapter, get_adapter, left_out
from harness.adapters.base import installed_reason, not_installed
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
from harness.memory import MemoryLimit
from harness.prepare import Prepared, prepare
from harness.repro import record as repro_record
from harness.results import PairResult, RunResult
from harness.run_events import (
    CaseEvent,
    CaseFailed,
    CasePrepared,
    Listener,
    PairFinished,
    PairStarted,
    RunEnded,
    RunStarted,
)
from harness.run_options import STEP_MODES, RunOptions
from harness.shard import Shard, pair_id
from harness.spec import Case
from harness.workers import Worker


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
    case = prep.case
    r = PairResult(case.name, adapter.name, compare.ERROR)
    if not selected_by_case(case, adapter, named):
        r.status, r.reason = compare.NOT_APPLICABLE, not_selected_reason(adapter)
        return r
    reason = adapter.not_applicable_reason(case)
    if reason is None and type(adapter) is Reference and prep.baseline_on != "numpy":
        reason = adapter.beside_a_gpu_baseline(case)
    if reason:
        r.status, r.reason = compare.NOT_APPLICABLE, reason
        return r
    prepared = _prepared(prep, adapter)
    if prepared is not None:
        out, r.seconds = prepared
        r.environment = adapter.environment()  # computed by prepare, in this process
    else:
        try:
            reason = executor.unavailable_reason(adapter)
            r.environment = executor.environment(adapter)
        except isolation.PairFailure as exc:
            r.reason, r.detail = str(exc), exc.detail
            return r
        if reason:
            r.status, r.reason = compare.UNAVAILABLE, reason
            return r
        try:  # NaN/Inf: checked below, here in this process
            out, r.seconds = executor.call(adapter, case, prep.canonical, prep.inputs,
                                           check_finite=False)
            r.handed = out.handed  # kept for an error row's reproducer (NaN or Inf below)
            adapter.check_finite(case, out)
        except isolation.PairFailure as exc:  # timed out, worker died, or raised in a worker
            r.reason, r.detail = str(exc), exc.detail
            return r
        except NotApplicable as exc:
            r.status, r.reason = compare.NOT_APPLICABLE, str(exc)
            return r
        except Unavailable as exc:
            r.status, r.reason = compare.UNAVAILABLE, str(exc)
            return r
        except KnownCrashGone as exc:  # a declared crash that did not come
            r.verdict = judges.crashed(case, adapter, compare.LOOKS_FIXED, str(exc),
                                       exc.upstream, came=False)
            r.status, r.reason = r.verdict.status, r.verdict.reason
            return r
        except KnownUpstreamCrash as exc:  # declared by the adapter: a finding, not a failure
            r.verdict = judges.crashed(case, adapter, compare.KNOWN_BUG,
                                       f"known upstream bug {exc.upstream}: {exc}",
                                       exc.upstream, came=True)
            r.status, r.reason = r.verdict.status, r.verdict.reason
            r.handed = _handed_by(exc) or r.handed
            return r
        except Exception as exc:  # an adapter crash is a result, not the end of the run
            r.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            r.handed = _handed_by(exc) or r.handed
            r.detail = traceback.format_exc()
            return r
    if adapter.baseline and prep.baseline_on == "numpy":
        r.outputs = out
        r.status, r.reason = compare.BASELINE, "the float64 reference all others are compared with"
        return r
    if step_mode not in STEP_MODES:
        raise HarnessError(f"expected one of {', '.join(STEP_MODES)}, got {step_mode!r}",
                           field="--step-mode")
    # the status from the rows, the figures and the case, as merge derives it from a shard's;
    # an attribution's reruns (attribute False) are judged as plain pairs
    r.outputs = out
    r.verdict = judges.judge(prep, adapter, out, step_mode=step_mode, read_known=attribute,
                             step_rows=lambda tol: _step_rows(prep, adapter, executor, tol))
    r.rows, r.status, r.reason = r.verdict.rows, r.verdict.status, r.verdict.reason
    if (attribute and r.status in (compare.DIVERGED, compare.KNOWN_BUG)
            and adapter.device == "gpu" and adapter.reruns):
        r.attribution = _attribution(prep, adapter, executor)
    return r


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


def missing_gpu(adapters: list[Adapter]) -> tuple[list[str], list[str]]:
    """What ``run --require-gpu`` refuses, and what it only notes, one line per adapter.

    Refused: a selected GPU adapter that cannot run although its framework is installed (a CPU
    build, no device, too old), or no GPU adapter at all that can run. Noted: a GPU adapter whose
    framework is not installed (a runner image without TensorFlow does not claim TensorFlow's
    GPU path); its pairs stay "unavailable" rows with the reason.
    """
    gpu = [a for a in adapters if a.device == "gpu"]
    if not gpu:
        return ["no GPU adapter selected (--adapters/--device)"], []
    refused, noted = [], []
    for a in gpu:
        why = isolation.unavailable_reason(a)  # asked where it runs
        if why is None:
            continue
        absent = not_installed(a.requires)
        if absent:
            noted.append(f"{a.name} not run: {', '.join(absent)} not installed here ({why})")
        else:
            refused.append(f"{a.name} unavailable: {why}")
    if not refused and len(noted) == len(gpu):
        refused.append("no selected GPU adapter can run here")
    return refused, noted


def _prepared(prep: Prepared, adapter: Adapter) -> tuple[Outputs, float] | None:
    """The outputs of the reference adapters, which :func:`harness.prepare.prepare` computed
    already (a float64 case's noise floor is its reference), and the seconds that took; None
    for any other adapter, which runs."""
    if type(adapter) is Reference and prep.baseline_on == "numpy":  # else it runs: judged
        return prep.reference, prep.reference_seconds
    if type(adapter) is NoiseFloor:
        return prep.noise_floor, prep.noise_floor_seconds
    return None


class _Collector:
    """Gathers the events of each case as they come, from this process or from worker
    processes in any order, passes each on to the run's listener, and hands them to the
    RunResult in plan order: case-major, adapters in the order given, whatever order they
    finished in."""

    def __init__(self, plan: list[tuple[Case, list[Adapter]]], on_event: Listener | None) -> None:
        self.plan = plan
        self.on_event = on_event
        self.total = sum(len(adapters) for _, adapters in plan)
        self.pairs: list[list[PairResult]] = [[] for _ in plan]
        self.prepare_seconds: dict[int, float] = {}
        self.case_errors: dict[int, str] = {}
        self.running: dict[int, str] = {}  # case index -> the adapter running now

    def event(self, index: int, event: CaseEvent) -> None:
        case, adapters = self.plan[index]
        if isinstance(event, CasePrepared):
            self.prepare_seconds[index] = event.seconds
        elif isinstance(event, CaseFailed):
            self.case_errors[index] = event.error
            self.pairs[index] = [PairResult(case.name, a.name, compare.ERROR,
                                            f"case could not be prepared: {event.error}")
                                 for a in adapters]
        elif isinstance(event, PairStarted):
            self.running[index] = event.adapter
        elif isinstance(event, PairFinished):
            self.running.pop(index, None)
            self.pairs[index].append(event.result)
        else:
            raise AssertionError(f"unknown event {event!r}")
        if self.on_event is not None:
            self.on_event(event)

    def lost(self, index: int, how: str) -> None:
        """The worker process running this case died: its pairs not reported yet are errors."""
        case, adapters = self.plan[index]
        running = self.running.get(index)
        reported = {p.adapter for p in self.pairs[index]}
        doing = (f"running {case.name}::{running}" if running else
                 f"preparing {case.name}" if index not in self.prepare_seconds else
                 f"running {case.name}")
        for a in adapters:
            if a.name in reported:
                continue
            reason = (f"{how} while running this pair" if a.name == running else
                      f"not run: {how} while {doing}")
            self.event(index, PairFinished(PairResult(case.name, a.name, compare.ERROR, reason)))

    def fill(self, result: RunResult) -> None:
        for index, (case, adapters) in enumerate(self.plan):
            if index in self.case_errors:
                result.case_errors[case.name] = self.case_errors[index]
            if index in self.prepare_seconds:
                result.prepare_seconds[case.name] = self.prepare_seconds[index]
            order = {a.name: k for k, a in enumerate(adapters)}
            result.pairs.extend(sorted(self.pairs[index], key=lambda p: order[p.adapter]))
        for p in result.pairs:
            if p.environment is not None:
                result.environments.setdefault(p.adapter, p.environment)


def _case_events(case: Case, adapters: list[Adapter], executor: isolation.Executor,
                 options: RunOptions) -> Iterator[CaseEvent]:
    """Prepare one case and run its pairs, as events for :class:`_Collector`. The same code
    runs in this process (``--jobs 1``) and in the worker processes of ``--jobs N``."""
    try:
        prep = prepare(case, options.max_memory, options.device)
    except HarnessError as exc:
        yield CaseFailed(case.name, str(exc), tuple(a.name for a in adapters))
        return
    yield CasePrepared(case.name, prep.seconds)
    for adapter in adapters:
        yield PairStarted(case.name, adapter.name)
        r = run_pair(prep, adapter, executor, options.step_mode, named=options.named)
        if options.repro and repro_record.wanted(r.status, case, adapter.name,
                                                 r.handed is not None):
            r.repro = _repro(prep, adapter, r)
        r.handed = None
        if r.outputs is not None:
            r.outputs.handed = None
        if not options.keep_outputs:
            r.outputs = None
        yield PairFinished(r)


def reproduce(prep: Prepared, adapter: Adapter) -> repro_record.ReproRecord:
    """Run one pair here and make its reproducer record whatever its verdict: ``rnn-harness
    repro`` (a passing pair's reproducer exits 0)."""
    return _repro(prep, adapter, run_pair(prep, adapter))


def _repro(prep: Prepared, adapter: Adapter, r: PairResult) -> repro_record.ReproRecord:
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


def _plan(cases: list[Case], adapters: list[Adapter], shard: Shard | None,
          named: frozenset[str] | None = None) -> list[tuple[Case, list[Adapter]]]:
    """Each case with the adapters it runs with: all of them, or the shard's pairs (cases
    without a pair in the shard are left out). A named-only adapter not named for a case
    (:func:`selected_by_case`) has no pair there: it is in the run for the cases that name it."""
    def planned(case: Case) -> list[Adapter]:
        return [a for a in adapters
                if a.named_only is None or selected_by_case(case, a, named)]

    if shard is None:
        return [(case, planned(case)) for case in cases]
    mine = set(shard.pick(pair_id(c.name, a.name) for c in cases for a in planned(c)))
    plan = [(c, [a for a in planned(c) if pair_id(c.name, a.name) in mine]) for c in cases]
    return [(c, chosen) for c, chosen in plan if chosen]


# The ``--jobs`` worker protocol (harness.workers): a worker replies _WorkerReady once started;
# sent a _RunCase, it replies each of the case's events as a _FromCase, then _CaseDone (after
# _CaseCrashed when the code around the pairs failed).


@dataclass(frozen=True)
class _RunCase:
    index: int  # in the plan
    case: Case
    adapters: tuple[str, ...]


@dataclass(frozen=True)
class _WorkerReady:
    pass


@dataclass(frozen=True)
class _FromCase:
    index: int
    event: CaseEvent


@dataclass(frozen=True)
class _CaseCrashed:
    index: int
    detail: str  # the traceback


@dataclass(frozen=True)
class _CaseDone:
    index: int


class _CaseJob:
    """A ``--jobs`` worker's job (:mod:`harness.workers`): run the cases it is sent, one at a
    time, as events. Its executor, and so the frameworks it imports, live as long as the
    worker."""

    def __init__(self, adapters: list[Adapter], options: RunOptions) -> None:
        self.by_name = {a.name: a for a in adapters}
        self.options = options
        self.executor = isolation.executor(options.timeout, options.isolate)
        self.index: int | None = None

    def ready(self) -> _WorkerReady:
        return _WorkerReady()

    def handle(self, message: _RunCase) -> Iterator[_FromCase | _CaseCrashed | _CaseDone]:
        self.index = message.index
        events = _case_events(message.case, [self.by_name[n] for n in message.adapters],
                              self.executor, self.options)
        try:
            for event in events:
                yield _FromCase(self.index, event)
        except GeneratorExit:
            raise
        except BaseException:  # a bug outside the pairs (they catch their own)
            yield _CaseCrashed(self.index, traceback.format_exc())
        yield _CaseDone(self.index)

    def unsendable(self, reply: _FromCase, error: Exception) -> _CaseCrashed:
        return _CaseCrashed(self.index, f"cannot send a {type(reply.event).__name__} event "
                                        f"back: {type(error).__name__}: {error}")

    def close(self) -> None:
        self.executor.close()


def _cost(case: Case) -> int:
    """A rough guess at a case's running time: its recurrent multiply-adds (x3 with gradients)."""
    gates = len(case.gates)
    flops = sum(case.batch * case.seq_len * case.num_directions * gates * case.hidden_size
                * (case.layer_input_size(layer) + case.hidden_size)
                for layer in range(case.num_layers))
    return flops * (3 if case.gradients else 1)


def _run_parallel(plan: list[tuple[Case, list[Adapter]]], adapters: list[Adapter],
                  collector: _Collector, options: RunOptions) -> None:
    """Run the plan's cases in ``jobs`` worker processes, a case at a time each, the next case
    to the first worker free."""
    # the biggest cases first, so that the last ones to finish are small
    waiting = deque(sorted(range(len(plan)), key=lambda i: -_cost(plan[i][0])))
    running: dict[Worker, int | None] = {}  # worker -> the case it runs (None: starting, idle)
    ready: set[Worker] = set()  # started and unpickled the adapters
    retired: list[Worker] = []  # told to stop, or dead

    def give_work(w: Worker) -> bool:
        if not waiting:
            return False
        running[w] = index = waiting.popleft()
        case, chosen = plan[index]
        w.send(_RunCase(index, case, tuple(a.name for a in chosen)))
        return True

    def start() -> None:
        w = Worker(_CaseJob, (adapters, options), name="rnn-harness-job")
        running[w] = None
        give_work(w)

    def retire(w: Worker) -> None:
        del running[w]
        retired.append(w)

    finished = False
    try:
        for _ in range(min(options.jobs, len(plan))):
            start()
        while running:
            busy = {w.conn: w for w in running}
            for conn in multiprocessing.connection.wait(list(busy)):
                w = busy[conn]
                try:
                    reply = w.receive()
                except (EOFError, OSError):  # the worker died: segfault, OOM killer, ...
                    if w not in ready:  # not one pair's fault: every worker would die the same
                        raise RuntimeError(f"a --jobs worker process could not start: the --jobs "
                                           f"worker process {w.how_it_ended()}") from None
                    if running[w] is not None:
                        collector.lost(running[w], f"the --jobs worker process {w.how_it_ended()}")
                    retire(w)
                    if waiting:
                        start()
                    continue
                if isinstance(reply, _FromCase):
                    collector.event(reply.index, reply.event)
                elif isinstance(reply, _WorkerReady):
                    ready.add(w)
                elif isinstance(reply, _CaseDone):
                    running[w] = None
                    if not give_work(w):
                        retire(w)
                        w.retire()
                elif isinstance(reply, _CaseCrashed):
                    raise RuntimeError(f"a --jobs worker failed on case "
                                       f"{plan[reply.index][0].name}:\n{reply.detail}")
                else:
                    raise AssertionError(f"unknown reply {reply!r}")
        finished = True
    finally:
        for w in retired:
            w.stop()
        for w in running:  # busy ones are left only after an exception (Ctrl-C): no waiting
            w.stop(5.0 if finished else 0.0)


def run(cases: Iterable[Case], adapters: list[Adapter], options: RunOptions | None = None,
        on_event: Listener | None = None) -> RunResult:
    """Run every case through every adapter, as ``options`` say (:class:`RunOptions`; None:
    its defaults). Pairs are ordered case-major, adapters in the order given, whatever
    ``options.jobs`` is.
    ``on_event``: told each event of the run as it comes (:mod:`harness.run_events`; a
    progress display, :class:`harness.progress.RunProgress`); None: a silent run.

    With ``jobs`` > 1, a worker process prepares each case it gets and runs all of that case's
    pairs; it imports each framework once, at its first pair of that framework. A worker that
    dies costs the pairs of its case that had not finished (error rows), and is replaced."""
    options = options or RunOptions()
    cases = list(cases)
    plan = _plan(cases, adapters, options.shard, options.named)
    limits = options.max_memory.record() if isinstance(options.max_memory, MemoryLimit) else None
    result = RunResult([case for case, _ in plan], adapters, jobs=options.jobs,
                       memory_limits=limits)
    if options.named is not None:  # a run that chose its adapters by name (the CLI's)
        result.left_out = left_out(adapters, options.device)
    if options.shard is not None:
        result.shard = str(options.shard)
        result.shard_of = {"cases": [c.name for c in cases], "adapters": [a.name for a in adapters]}
    start = time.perf_counter()
    collector = _Collector(plan, on_event)
    if on_event is not None:
        on_event(RunStarted(collector.total))
    try:
        if options.jobs > 1 and len(plan) > 1:
            _run_parallel(plan, adapters, collector, options)
        else:
            executor = isolation.executor(options.timeout, options.isolate)
            try:
                for index, (case, chosen) in enumerate(plan):
                    for event in _case_events(case, chosen, executor, options):
                        collector.event(index, event)
            finally:
                # on an exception the workers go too: worker processes (harness.workers) and
                # daemon threads end with this process
                executor.close()
    finally:
        if on_event is not None:
            on_event(RunEnded())
    collector.fill(result)
    for a in adapters:  # an adapter no pair reached: from its installed packages, since
        # importing a framework that ran nothing costs seconds a run (the ``adapters`` command's
        # default); a report renders it as "installed", not as checked
        if a.name not in result.environments:
            reason = installed_reason(a)
            result.environments[a.name] = {"available": reason is None, "reason": reason,
                                           "checked": False}
    check_blind_spots(result)
    result.seconds = time.perf_counter() - start
    return result


def check_blind_spots(result: RunResult) -> None:
    """The blind-spot check of every case that compared something (:mod:`harness.blind`),
    judged with the tolerance of each adapter it compared; a vacuous case (blind to every
    plausible mistake, and not marked ``allow_vacuous``) becomes a case error."""
    for case in result.cases:
        check = blind_check.check_compared(result, case)
        if check is None:
            continue
        result.blind[case.name] = check
        if check.error:
            result.case_errors[case.name] = check.error
