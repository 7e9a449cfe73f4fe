"""Running case x adapter pairs: nothing lost when one adapter fails, events as it goes
(:mod:`harness.run_events`; :mod:`harness.progress` shows them). The plan of a run (which pairs,
a shard's), its cases run here or in ``--jobs`` workers (:mod:`harness.case_jobs`), each pair
run and judged by :mod:`harness.pairs`, and the blind-spot check of the whole run."""

from __future__ import annotations

import time
from collections.abc import Iterable

from harness import blind as blind_check
from harness import isolation
from harness.adapters import Adapter, left_out
from harness.adapters.base import installed_reason, not_installed
from harness.case_jobs import CasePlan, Collector, run_parallel, run_serial
from harness.memory import MemoryLimit
from harness.pairs import selected_by_case
from harness.results import RunResult
from harness.run_events import Listener, RunEnded, RunStarted
from harness.run_options import RunOptions
from harness.shard import Shard, pair_id
from harness.spec import Case


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



def _plan(cases: list[Case], adapters: list[Adapter], shard: Shard | None,
          named: frozenset[str] | None = None) -> CasePlan:
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
    collector = Collector(plan, on_event)
    if on_event is not None:
        on_event(RunStarted(collector.total))
    try:
        if options.jobs > 1 and len(plan) > 1:
            run_parallel(plan, adapters, collector, options)
        else:
            run_serial(plan, collector, options)
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
