"""A run's cases as jobs: each case prepared and its pairs run as events
(:mod:`harness.run_events`), gathered in plan order by a :class:`Collector`, either here one
case after another or in ``--jobs`` worker processes (:mod:`harness.workers`), a case at a time
each, with the messages they exchange."""

from __future__ import annotations

import multiprocessing.connection
import traceback
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from harness import compare, isolation
from harness.adapters import Adapter
from harness.errors import HarnessError
from harness.pairs import pair_repro, run_pair
from harness.prepare import prepare
from harness.repro import record as repro_record
from harness.results import PairResult, RunResult
from harness.run_events import (
    CaseEvent,
    CaseFailed,
    CasePrepared,
    Listener,
    PairFinished,
    PairStarted,
)
from harness.run_options import RunOptions
from harness.spec import Case
from harness.workers import Worker

CasePlan = list[tuple[Case, list[Adapter]]]  # each case with the adapters it runs with


class Collector:
    """Gathers the events of each case as they come, from this process or from worker
    processes in any order, passes each on to the run's listener, and hands them to the
    RunResult in plan order: case-major, adapters in the order given, whatever order they
    finished in."""

    def __init__(self, plan: CasePlan, on_event: Listener | None) -> None:
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


def case_events(case: Case, adapters: list[Adapter], executor: isolation.Executor,
                 options: RunOptions) -> Iterator[CaseEvent]:
    """Prepare one case and run its pairs, as events for :class:`Collector`. The same code
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
            r.repro = pair_repro(prep, adapter, r)
        r.handed = None
        if r.outputs is not None:
            r.outputs.handed = None
        if not options.keep_outputs:
            r.outputs = None
        yield PairFinished(r)



def run_serial(plan: CasePlan, collector: Collector, options: RunOptions) -> None:
    """Run the plan's cases here, one after another (``--jobs 1``)."""
    executor = isolation.executor(options.timeout, options.isolate)
    try:
        for index, (case, chosen) in enumerate(plan):
            for event in case_events(case, chosen, executor, options):
                collector.event(index, event)
    finally:
        # on an exception the workers go too: worker processes (harness.workers) and
        # daemon threads end with this process
        executor.close()


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
        events = case_events(message.case, [self.by_name[n] for n in message.adapters],
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


def run_parallel(plan: CasePlan, adapters: list[Adapter], collector: Collector,
                 options: RunOptions) -> None:
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
