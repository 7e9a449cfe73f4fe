"""Running case x adapter pairs: nothing lost when one adapter fails, progress as it goes."""

from __future__ import annotations

import multiprocessing.connection
import shutil
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

import pandas as pd

from harness import attribution, compare, isolation, steplocal
from harness import blind as blind_check
from harness.adapters import Adapter, get_adapter
from harness.adapters.base import not_installed
from harness.adapters.reference import NoiseFloor, Reference
from harness.data import Outputs
from harness.errors import HarnessError, NotApplicable, Unavailable
from harness.prepare import Prepared, prepare
from harness.shard import Shard, pair_id
from harness.spec import Case
from harness.workers import Worker


@dataclass
class PairResult:
    case: str
    adapter: str
    status: str  # pass | DIVERGED | not applicable | unavailable | error | baseline
    reason: str = ""
    seconds: float = 0.0
    rows: pd.DataFrame | None = None  # the divergence rows (harness.compare.COLUMNS)
    outputs: Outputs | None = None
    detail: str = ""  # traceback of an error, for errors.log
    attribution: str = ""  # a DIVERGED GPU pair: what its reruns say caused it (attribution.py)
    # the adapter's availability, versions and precision flags, taken in the process it ran in
    # (Adapter.environment); gathered into RunResult.environments for run.json
    environment: dict | None = None

    @property
    def has_rows(self) -> bool:
        return self.rows is not None and not self.rows.empty

    @property
    def worst(self) -> pd.Series | None:
        """The free-running row furthest beyond (or closest to) its tolerance."""
        return compare.worst(compare.of_mode(self.rows, compare.FREE))

    @property
    def first_diverging(self) -> pd.Series | None:
        """The first row beyond tolerance, free-running rows first
        (:func:`harness.compare.first_divergence`)."""
        return compare.first_divergence(self.rows)

    @property
    def step_rows(self) -> pd.DataFrame | None:
        """The step-local rows (:mod:`harness.steplocal`); None or empty when not run."""
        return compare.of_mode(self.rows, compare.STEP)


@dataclass
class RunResult:
    cases: list[Case]
    adapters: list[Adapter]
    pairs: list[PairResult] = field(default_factory=list)
    prepare_seconds: dict[str, float] = field(default_factory=dict)
    case_errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    jobs: int = 1  # worker processes that ran the cases (``run --jobs``)
    shard: str | None = None  # "K/N" when this run is one shard of a larger one (harness.shard)
    shard_of: dict | None = None  # the whole run a shard is part of: its "cases" and "adapters"
    blind: dict[str, blind_check.BlindCheck] = field(default_factory=dict)  # per case name
    environments: dict[str, dict] = field(default_factory=dict)  # adapter -> where it ran

    @property
    def divergence(self) -> pd.DataFrame:
        """Every pair's rows in one DataFrame (:data:`harness.compare.COLUMNS`)."""
        frames = [p.rows for p in self.pairs if p.has_rows]
        if not frames:
            return pd.DataFrame(columns=compare.COLUMNS)
        return pd.concat(frames, ignore_index=True)

    @property
    def failed(self) -> bool:
        return bool(self.case_errors) or any(
            p.status in (compare.DIVERGED, compare.ERROR, compare.LOOKS_FIXED)
            for p in self.pairs)


def selected_by_case(case: Case, adapter: Adapter) -> bool:
    wanted = set(case.adapters)
    unwanted = set(case.exclude)  # `exclude: [all]` excludes every adapter
    return (("all" in wanted or adapter.name in wanted)
            and "all" not in unwanted and adapter.name not in unwanted)


STEP_MODES = ("auto", "on", "off")
LOW_PRECISION = ("float32", "float16", "bfloat16")


def run_pair(prep: Prepared, adapter: Adapter, executor: isolation.Executor | None = None,
             step_mode: str = "auto", attribute: bool = True) -> PairResult:
    """Run one pair; every outcome, including a crash, a hang past the executor's timeout or a
    dead worker process, becomes a PairResult. ``executor``: where the adapter runs
    (:mod:`harness.isolation`; default: right here, no time limit). ``step_mode``: when to add
    step-local rows (:func:`wants_step_mode`). ``attribute``: a DIVERGED pair of a GPU adapter
    that declares rerun variants is rerun with each to name the cause."""
    executor = executor or isolation.InProcess()
    case = prep.case
    r = PairResult(case.name, adapter.name, compare.ERROR)
    if not selected_by_case(case, adapter):
        r.status, r.reason = compare.NOT_APPLICABLE, "not selected by the case (adapters/exclude)"
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
        except Exception as exc:  # an adapter crash is a result, not the end of the run
            r.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            r.detail = traceback.format_exc()
            return r
    if adapter.baseline and prep.baseline_on == "numpy":
        r.outputs = out
        r.status, r.reason = compare.BASELINE, "the float64 reference all others are compared with"
        return r
    tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
    d = compare.divergence(case, adapter.name, out, prep.reference, tol, prep.noise_floor)
    r.outputs, r.rows, r.status = out, d.rows, d.verdict
    r.reason = _join(adapter.gradient_note(case) or "", adapter.route_note(case) or "", out.note)
    if adapter.baseline:  # the NumPy reference beside a baseline computed on the GPU
        r.reason = _join(r.reason, f"judged against the float64 reference on {prep.baseline_on}")
    if wants_step_mode(step_mode, case, d.passed):
        _add_step_rows(prep, adapter, executor, r, tol)
    if attribute and r.status == compare.DIVERGED and adapter.device == "gpu" and adapter.reruns:
        r.attribution = _attribution(prep, adapter, executor)
    if attribute:  # not for an attribution's reruns, judged as plain pairs
        r.status, r.reason = compare.as_expected(r.status, r.reason, case, adapter.name)
    return r


def wants_step_mode(step_mode: str, case: Case, passed: bool) -> bool:
    """``on``: every compared pair; ``auto``: low-precision pairs that did not pass free-running
    (where rounding amplified by the recurrence may be the cause); ``off``: none."""
    if step_mode not in STEP_MODES:
        raise HarnessError(f"expected one of {', '.join(STEP_MODES)}, got {step_mode!r}",
                           field="--step-mode")
    return step_mode == "on" or (step_mode == "auto" and not passed
                                 and case.dtype in LOW_PRECISION)


def _join(*reasons: str) -> str:
    return "; ".join(r for r in reasons if r)


def _add_step_rows(prep: Prepared, adapter: Adapter, executor: isolation.Executor,
                   r: PairResult, tol: compare.Tolerance) -> None:
    """Run the adapter on each layer's derived step case (:mod:`harness.steplocal`) through the
    pair's executor, add the step rows and say what they show
    (:func:`harness.compare.pair_verdict`: they never change the verdict). An adapter that
    cannot run a derived case (no initial states, ...) or fails on it says why."""
    case = prep.case
    B, T = case.batch, case.seq_len
    frames = []
    for sc in steplocal.step_cases(prep):
        reason = adapter.not_applicable_reason(sc.case)
        if reason:
            r.reason = _join(r.reason, f"step mode not applicable: {reason}")
            return
        try:
            out, _ = executor.call(adapter, sc.case, sc.canonical, sc.inputs, check_finite=False)
        except NotApplicable as exc:
            r.reason = _join(r.reason, f"step mode not applicable: {exc}")
            return
        except Exception as exc:  # PairFailure (timeout, dead worker) or a crash: one note
            r.reason = _join(r.reason, "step mode failed: "
                             + f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
            return
        rows = compare.step_divergence(case, adapter.name, sc.layer, sc.scatter(out.y, B, T),
                                       prep.reference.y_layers[sc.layer],
                                       sc.scatter(sc.floor.y, B, T), tol).rows
        frames.append(rows)
    step = pd.concat(frames, ignore_index=True)
    r.status, why = compare.pair_verdict(r.rows, step, tol.floor_factor)
    r.rows = pd.concat([r.rows, step], ignore_index=True)
    r.reason = _join(r.reason, why)


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
        why = a.unavailable_reason()
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


Progress = Callable[[str], None]
"""Called with one line per finished pair (and per case that could not be prepared). A callback
that also has ``started(line)`` is told which pair runs now, and ``close()`` when the run ends."""


class ProgressLine(str):
    """A progress line that also carries the status it reports (a plain ``str`` to callbacks
    that don't care), so a terminal display can keep DIVERGED and error lines on screen."""

    status: str = ""

    def __new__(cls, text: str, status: str = "") -> ProgressLine:
        line = super().__new__(cls, text)
        line.status = status
        return line


class StderrProgress:
    """Progress on stderr (``plain_progress``).

    Not a terminal (CI logs, files): one plain line per finished pair. A terminal: a single line
    rewritten in place (carriage return) with pairs done of total, the pair running now and the time
    left; DIVERGED and error results are printed above it as lines of their own.
    """

    ATTENTION = (compare.DIVERGED, compare.ERROR, compare.LOOKS_FIXED)

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream  # None: sys.stderr when called, so redirection and capture work
        self._live = False  # a status line is on screen

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _tty(self) -> bool:
        try:
            return self.stream.isatty()
        except (AttributeError, ValueError):  # closed or not a file
            return False

    def _status(self, line: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write("\r" + line[:width] + "\x1b[K")
        self.stream.flush()
        self._live = True

    def __call__(self, line: str) -> None:
        if not self._tty():
            print(line, file=self.stream, flush=True)
        elif getattr(line, "status", "") in self.ATTENTION:
            self.close()
            print(line, file=self.stream, flush=True)
        else:
            self._status(line)

    def started(self, line: str) -> None:
        if self._tty():
            self._status(line)

    def close(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._live = False


plain_progress = StderrProgress()


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _started(progress: Progress | None, pair: str, start: float, finished: list[float],
             total: int) -> None:
    """Tell a progress display that has ``started`` which pair runs now."""
    if hasattr(progress, "started"):
        so_far = _duration(time.perf_counter() - start)
        progress.started(f"[{len(finished)}/{total}] running {pair}  ({so_far} so far, "
                         f"{_time_left(finished, total)})")


# No estimate before this many pairs are done: the first pairs pay the framework imports
# (seconds each) and would make an 11 s run announce minutes left.
ETA_AFTER = 3


def _time_left(finished: list[float], total: int) -> str:
    """Pairs left times the time per pair over the later half of the pairs done (the first ones
    carry the imports); unknown before ``ETA_AFTER`` pairs. ``finished``: the perf_counter
    time each pair ended, in order."""
    done = len(finished)
    if done >= total:
        return "~0s left"
    if done < ETA_AFTER:
        return "time left unknown"
    half = done // 2
    per_pair = (time.perf_counter() - finished[half - 1]) / (done - half)
    return f"~{_duration(per_pair * (total - done))} left"


def describe(r: PairResult) -> str:
    if r.status == compare.PASS:
        w = r.worst
        return (f"pass  max_abs {w['max_abs']:.2e} ({w['tol_ratio']:.2g}x tolerance) "
                f"{r.seconds:.2f}s")
    if r.status in (compare.DIVERGED, compare.KNOWN_BUG):
        f = r.first_diverging
        known = f"{r.status}: " if r.status == compare.KNOWN_BUG else ""
        return (f"{known}DIVERGED first at {compare.where(f)}: max_abs {f['max_abs']:.2e} "
                f"({f['tol_ratio']:.3g}x tolerance)")
    return f"{r.status}" + (f": {r.reason}" if r.reason else "")


class _Collector:
    """Gathers the events of each case (prepared, started, pair, case_error) as they come, from
    this process or from worker processes in any order, prints progress, and hands them to the
    RunResult in plan order: case-major, adapters in the order given, whatever order they
    finished in."""

    def __init__(self, plan: list[tuple[Case, list[Adapter]]], progress: Progress | None) -> None:
        self.plan = plan
        self.progress = progress
        self.total = sum(len(adapters) for _, adapters in plan)
        self.done = 0
        self.start = time.perf_counter()
        self.finished: list[float] = []  # when each pair ended, for the time left
        self.pairs: list[list[PairResult]] = [[] for _ in plan]
        self.prepare_seconds: dict[int, float] = {}
        self.case_errors: dict[int, str] = {}
        self.running: dict[int, str] = {}  # case index -> the adapter running now

    def event(self, index: int, event: tuple) -> None:
        case, adapters = self.plan[index]
        kind = event[0]
        if kind == "prepared":
            self.prepare_seconds[index] = event[1]
        elif kind == "case_error":
            self.case_errors[index] = event[1]
            self.pairs[index] = [PairResult(case.name, a.name, compare.ERROR,
                                            f"case could not be prepared: {event[1]}")
                                 for a in adapters]
            self.done += len(adapters)
            self.finished += [time.perf_counter()] * len(adapters)
            if self.progress:
                self.progress(ProgressLine(f"[{self.done}/{self.total}] {case.name}: error: "
                                           f"{event[1]}", compare.ERROR))
        elif kind == "started":
            self.running[index] = event[1]
            _started(self.progress, f"{case.name}::{event[1]}", self.start, self.finished,
                     self.total)
        elif kind == "pair":
            r: PairResult = event[1]
            self.running.pop(index, None)
            self.pairs[index].append(r)
            self.done += 1
            self.finished.append(time.perf_counter())
            if self.progress:
                line = (f"[{self.done}/{self.total}] {r.case}::{r.adapter}  {describe(r)}  "
                        f"({_time_left(self.finished, self.total)})")
                self.progress(ProgressLine(line, r.status))
        else:
            raise AssertionError(f"unknown event {kind!r}")

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
            self.event(index, ("pair", PairResult(case.name, a.name, compare.ERROR, reason)))

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
                 max_memory: int | None, keep_outputs: bool, step_mode: str = "auto",
                 device: str = "all") -> Iterator[tuple]:
    """Prepare one case and run its pairs, as events for :class:`_Collector`. The same code
    runs in this process (``--jobs 1``) and in the worker processes of ``--jobs N``.
    ``device``: the run's (``--device``; gpu: the baseline on the GPU, :func:`prepare`)."""
    try:
        prep = prepare(case, max_memory, device)
    except HarnessError as exc:
        yield ("case_error", str(exc))
        return
    yield ("prepared", prep.seconds)
    for adapter in adapters:
        yield ("started", adapter.name)
        r = run_pair(prep, adapter, executor, step_mode)
        if not keep_outputs:
            r.outputs = None
        yield ("pair", r)


def _plan(cases: list[Case], adapters: list[Adapter], shard: Shard | None
          ) -> list[tuple[Case, list[Adapter]]]:
    """Each case with the adapters it runs with: all of them, or the shard's pairs (cases
    without a pair in the shard are left out)."""
    if shard is None:
        return [(case, list(adapters)) for case in cases]
    mine = set(shard.pick(pair_id(c.name, a.name) for c in cases for a in adapters))
    plan = [(c, [a for a in adapters if pair_id(c.name, a.name) in mine]) for c in cases]
    return [(c, chosen) for c, chosen in plan if chosen]


class _CaseJob:
    """A ``--jobs`` worker's job (:mod:`harness.workers`): run the cases it is sent, one at a
    time, as events. Its executor, and so the frameworks it imports, live as long as the
    worker."""

    def __init__(self, adapters: list[Adapter], options: dict) -> None:
        self.by_name = {a.name: a for a in adapters}
        self.options = options
        self.executor = isolation.executor(options["timeout"], options["isolate"])
        self.index: int | None = None

    def ready(self) -> tuple:
        return (None, ("ready",))

    def handle(self, message: tuple) -> Iterator[tuple]:
        _, self.index, case, names = message
        events = _case_events(case, [self.by_name[n] for n in names], self.executor,
                              self.options["max_memory"], self.options["keep_outputs"],
                              self.options.get("step_mode", "auto"),
                              self.options.get("device", "all"))
        try:
            for event in events:
                yield (self.index, event)
        except GeneratorExit:
            raise
        except BaseException:  # a bug outside the pairs (they catch their own)
            yield (self.index, ("crash", traceback.format_exc()))
        yield (self.index, ("done",))

    def unsendable(self, reply: tuple, error: Exception) -> tuple:
        return (self.index, ("crash", f"cannot send a {reply[1][0]!r} event back: "
                                      f"{type(error).__name__}: {error}"))

    def close(self) -> None:
        self.executor.close()


def _cost(case: Case) -> int:
    """A rough guess at a case's running time: its recurrent multiply-adds (x3 with gradients)."""
    gates = len(case.gates)
    flops = sum(case.batch * case.seq_len * case.num_directions * gates * case.hidden_size
                * (case.layer_input_size(layer) + case.hidden_size)
                for layer in range(case.num_layers))
    return flops * (3 if case.gradients else 1)


def _run_parallel(plan: list[tuple[Case, list[Adapter]]], adapters: list[Adapter], jobs: int,
                  collector: _Collector, options: dict) -> None:
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
        w.send(("case", index, case, [a.name for a in chosen]))
        return True

    def start() -> None:
        # not a daemon: with --isolate it starts worker processes of its own
        w = Worker(_CaseJob, (adapters, options), name="rnn-harness-job", daemon=False)
        running[w] = None
        give_work(w)

    def retire(w: Worker) -> None:
        del running[w]
        retired.append(w)

    finished = False
    try:
        for _ in range(min(jobs, len(plan))):
            start()
        while running:
            busy = {w.conn: w for w in running}
            for conn in multiprocessing.connection.wait(list(busy)):
                w = busy[conn]
                try:
                    index, event = w.receive()
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
                if event[0] == "ready":
                    ready.add(w)
                elif event[0] == "done":
                    running[w] = None
                    if not give_work(w):
                        retire(w)
                        w.retire()
                elif event[0] == "crash":
                    raise RuntimeError(f"a --jobs worker failed on case {plan[index][0].name}:\n"
                                       f"{event[1]}")
                else:
                    collector.event(index, event)
        finished = True
    finally:
        for w in retired:
            w.stop()
        for w in running:  # busy ones are left only after an exception (Ctrl-C): no waiting
            w.stop(5.0 if finished else 0.0)


def run(
    cases: Iterable[Case],
    adapters: list[Adapter],
    progress: Progress | None = plain_progress,
    keep_outputs: bool = False,
    timeout: float | None = None,
    isolate: bool = False,
    max_memory: int | None = None,
    shard: Shard | None = None,
    jobs: int = 1,
    step_mode: str = "auto",
    device: str = "all",
) -> RunResult:
    """Run every case through every adapter. Pairs are ordered case-major, adapters in the
    order given, whatever ``jobs`` is.

    ``timeout``: seconds a pair may run before it is an error row (None: no limit);
    ``isolate``: run each adapter in a worker process (:mod:`harness.isolation`), so a hang
    or a crash of the process costs one pair; ``max_memory``: bytes a case may need (default:
    :func:`harness.memory.max_memory`); ``shard``: run only this shard's pairs
    (:mod:`harness.shard`); ``jobs``: worker processes running cases side by side (1: all in
    this process). A worker prepares each case it gets and runs all of that case's pairs;
    it imports each framework once, at its first pair of that framework. A worker that dies
    costs the pairs of its case that had not finished (error rows), and is replaced.
    ``step_mode``: auto | on | off, when pairs also get step-local rows
    (:func:`wants_step_mode`, :mod:`harness.steplocal`). ``device``: the run's (cpu | gpu |
    all, as ``--device``): on gpu, each case's float64 reference and noise floor are computed
    on the GPU where torch sees one, and the NumPy reference is judged against them
    (:func:`harness.prepare.prepare`)."""
    cases = list(cases)
    if jobs < 1:
        raise HarnessError(f"expected a number of worker processes >= 1, got {jobs}",
                           field="--jobs")
    plan = _plan(cases, adapters, shard)
    result = RunResult([case for case, _ in plan], adapters, jobs=jobs)
    if shard is not None:
        result.shard = str(shard)
        result.shard_of = {"cases": [c.name for c in cases], "adapters": [a.name for a in adapters]}
    collector = _Collector(plan, progress)
    options = {"timeout": timeout, "isolate": isolate, "max_memory": max_memory,
               "keep_outputs": keep_outputs, "step_mode": step_mode, "device": device}
    try:
        if jobs > 1 and len(plan) > 1:
            _run_parallel(plan, adapters, jobs, collector, options)
        else:
            executor = isolation.executor(timeout, isolate)
            try:
                for index, (case, chosen) in enumerate(plan):
                    for event in _case_events(case, chosen, executor, max_memory, keep_outputs,
                                              step_mode, device):
                        collector.event(index, event)
            finally:
                # on an exception the workers go too: daemon processes and threads end with
                # this process
                executor.close()
    finally:
        if hasattr(progress, "close"):
            progress.close()
    collector.fill(result)
    check_blind_spots(result)
    result.seconds = time.perf_counter() - collector.start
    return result


def check_blind_spots(result: RunResult) -> None:
    """The blind-spot check of every case that compared something (:mod:`harness.blind`),
    judged with the tolerance of each adapter it compared; a vacuous case (blind to every
    plausible mistake, and not marked ``allow_vacuous``) becomes a case error."""
    for case in result.cases:
        check = blind_check.of_result(result, case)  # made now: the run has none yet
        if check is None:
            continue
        result.blind[case.name] = check
        if check.error:
            result.case_errors[case.name] = check.error
