"""``rnn-harness run``: run cases through adapters and write a report folder."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

from harness.cli.options import plots_option
from harness.cli.outcome import compared_anything, counts, tested_a_framework
from harness.errors import HarnessError, printable
from harness.run_options import STEP_MODES, RunOptions


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    r = commands.add_parser("run", help="run cases through adapters and write a report folder",
                            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("cases", nargs="*", help="case files or folders (default: the bundled cases, "
                   "which `rnn-harness init DIR` copies out)")
    r.add_argument("--builtin", action="store_true",
                   help="run the bundled cases (the default when no CASES are given)")
    r.add_argument("--adapters", help="comma-separated adapter names, or all (the default: "
                   "every adapter of the devices --device selects but those run only when "
                   "named, which `rnn-harness adapters` lists), or every (those too)")
    r.add_argument("--atol", type=float, metavar="A",
                   help="absolute tolerance for every case, dtype and adapter (replaces the "
                        "cases' and adapters' own)")
    r.add_argument("--rtol", type=float, metavar="R",
                   help="relative tolerance for every case, dtype and adapter (replaces the "
                        "cases' and adapters' own)")
    r.add_argument("--device", choices=["cpu", "gpu", "all"], default=None,
                   help="the adapters' device (default: the devices this machine has: cpu, "
                        "and gpu too where nvidia-smi sees a GPU; all with --require-gpu or "
                        "when --adapters names adapters)")
    r.add_argument("--out", default="reports/latest",
                   help="report folder (default: reports/latest)")
    r.add_argument("--save-outputs", action="store_true", help="write outputs/<case>/<adapter>.npz")
    r.add_argument("--no-repro", dest="repro", action="store_false",
                   help="no repro/<case>/<adapter>/ reproducers (written by default for each "
                        "DIVERGED, error-with-outputs or known-upstream-bug pair)")
    r.add_argument("--quiet", action="store_true", help="no progress lines")
    r.add_argument("--verbose", "-v", action="store_true",
                   help="a line for every pair as it finishes (by default: one progress bar on "
                        "a terminal, and a line only for each pair that did not pass)")
    r.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="per pair: an adapter still running after this is an error row "
                        "(default 600; 0: no limit)")
    r.add_argument("--isolate", action="store_true",
                   help="run each adapter in a worker process, restarted after a crash or timeout")
    r.add_argument("--max-memory", metavar="SIZE",
                   help="refuse cases whose tensors need more, on the host and on the GPU "
                        "(default: $RNN_HARNESS_MAX_MEMORY, else what the machine has: "
                        "min(50%% of RAM, available RAM), and 80%% of free GPU memory)")
    r.add_argument("--shard", metavar="K/N",
                   help="run only shard K of N (1 <= K <= N): the case::adapter pair ids, in "
                        "the order of their SHA-256 digests, are dealt round-robin, so every "
                        "pair is in exactly one shard and shard sizes differ by at most one, "
                        "whatever the order of cases and adapters; the report folder holds only "
                        "this shard's pairs (run.json says which); combine the N folders with "
                        "`rnn-harness merge`")
    r.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="run cases in N worker processes side by side (default: one per CPU, "
                        "or $RNN_HARNESS_JOBS; 1: all in this process; 0: one per CPU; a run "
                        "of one case runs in this process); each worker prepares a case and "
                        "runs its pairs, importing each framework once (about 7 s and its "
                        "memory per worker); thread pools are left as they are, since their "
                        "size changes results in the last bits; the report is the same as with "
                        "--jobs 1, in the same order")
    r.add_argument("--step-mode", choices=STEP_MODES, default=RunOptions.step_mode,
                   help="also run each layer one step at a time from the reference's own "
                        "states and report the one-step error (rows with mode step; "
                        "docs/equations.md, Step-local divergence): auto (default) for "
                        "float32/float16/bfloat16 pairs that did not pass free-running, on for "
                        "every pair, off never")
    r.add_argument("--require-gpu", action="store_true",
                   help="exit 1 before running, naming each selected GPU adapter that cannot run "
                        "here and why (or saying none is selected), instead of reporting them "
                        "unavailable: a GPU CI job must not pass without GPU work")
    plots_option(r)
    return r


def handle(args: argparse.Namespace) -> int:
    from harness import cases as case_files
    from harness import memory, prepare, runner
    from harness.bundled import bundled_cases
    from harness.plan import Request, plan
    from harness.progress import RunDisplay, RunProgress
    from harness.report import write_report
    from harness.report.folder import report_names
    from harness.report.swap import check_writable
    from harness.shard import parse_shard

    if args.builtin and args.cases:
        raise HarnessError("give CASES or --builtin, not both", field="--builtin")
    # no CASES: the bundled cases, wherever the command runs (`rnn-harness init DIR` copies them)
    where = args.cases or [str(bundled_cases())]
    cases = case_files.discover(where)
    if not cases:
        raise HarnessError("no case files found", file=",".join(where))
    for name, value in (("--atol", args.atol), ("--rtol", args.rtol)):
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise HarnessError(f"expected a finite tolerance >= 0, got {value:g}", field=name)
    if args.atol is not None or args.rtol is not None:
        cases = [_tolerance_override(c, args.atol, args.rtol) for c in cases]
    # the adapters, the device and the named-only rule: harness.plan, as check() and the plugin
    planned = plan(Request(adapters=args.adapters, device=args.device,
                           require_gpu=args.require_gpu, cases=cases))
    chosen, device, named = list(planned.adapters), planned.device, planned.named
    if args.require_gpu:
        missing, noted = runner.missing_gpu(chosen)
        for line in noted:
            print(f"--require-gpu: note: {printable(line)}", file=sys.stderr)
        if missing:
            print("\n".join(f"--require-gpu: {printable(line)}" for line in missing),
                  file=sys.stderr)
            return 1
    shard = parse_shard(args.shard) if args.shard is not None else None
    jobs = _jobs(args.jobs)
    if not args.timeout >= 0:  # also refuses nan
        raise HarnessError(f"expected seconds >= 0 (0: no limit), got {args.timeout:g}",
                           field="--timeout")
    # the limits follow the machine: RAM for the host, free GPU memory where GPU adapters run
    limit = memory.max_memory(args.max_memory, gpu_work=planned.gpu_work)
    # before the run, not after it: every name the report writes
    check_writable(args.out, names=report_names([(c.name, a.name) for c in cases for a in chosen],
                                                outputs=args.save_outputs,
                                                models={a.name: a.saved_models for a in chosen}))
    for case in cases:  # bad input is exit 2 before anything runs, not an error row later
        prepare.check(case, limit)
    options = RunOptions(timeout=args.timeout or None, isolate=args.isolate, max_memory=limit,
                         keep_outputs=args.save_outputs, shard=shard, jobs=jobs, repro=args.repro,
                         step_mode=args.step_mode, device=device, named=named)
    display = None if args.quiet else RunProgress() if args.verbose else RunDisplay()
    result = runner.run(cases, chosen, options, on_event=display)
    report_progress = None if args.quiet else _report_progress
    out = write_report(result, args.out, outputs=args.save_outputs, plots=args.plots,
                       progress=report_progress)
    where = f"shard {shard}: {len(result.pairs)} pair(s) of " if shard else ""
    print(printable(f"{where}{len(cases)} case(s), {len(chosen)} adapter(s): "
                    + _run_counts(result.pairs, chosen, planned.note) + _case_problems(result)
                    + f"; report in {out}/ (pairs {result.seconds:.1f} s; "
                    f"{_process_seconds():.1f} s in all)"))
    if result.failed:
        return 1
    if shard is None and not (compared_anything(result.pairs) and tested_a_framework(result)):
        return 1
    return 0


def _tolerance_override(case, atol: float | None, rtol: float | None):
    """``run --atol/--rtol``: the case with one tolerance for every dtype and adapter (the
    case's own per-dtype and per-adapter entries, and the adapters' defaults, are replaced)."""
    from harness.spec import Tol, Tolerance

    old = case.tolerance
    atol = old.atol if atol is None else atol
    rtol = old.rtol if rtol is None else rtol
    both = Tol(atol=atol, rtol=rtol)
    from harness.adapters import ADAPTERS

    tol = Tolerance(atol=atol, rtol=rtol, **{case.dtype: both},
                    adapters={name: both for name in ADAPTERS})
    return case.model_copy(update={"tolerance": tol})


def _run_counts(pairs: list, chosen: list, why: str) -> str:
    """The summary line's counts: a run of CPU and GPU adapters gives the GPU pairs after the
    CPU counts (on a machine without a GPU they are all unavailable, and would swamp them); a
    default run on such a machine says the GPU adapters were left out."""
    gpu = {a.name for a in chosen if a.device == "gpu" and not a.baseline}
    if not gpu or len(gpu) == len([a for a in chosen if not a.baseline]):
        return counts(pairs) + (f"; {why}" if why else "")
    cpu_pairs = [p for p in pairs if p.adapter not in gpu]
    gpu_pairs = [p for p in pairs if p.adapter in gpu]
    return f"{counts(cpu_pairs)}; GPU pairs ({len(gpu)} adapter(s)): {counts(gpu_pairs)}"


def _case_problems(result) -> str:
    """The last line's word on cases: the vacuous ones (blind to every plausible mistake) and
    the others that could not run, each a reason for exit 1 that no pair count shows."""
    vacuous = sum(1 for n in result.case_errors if n in result.blind and result.blind[n].error)
    other = len(result.case_errors) - vacuous
    parts = ([f"{vacuous} vacuous case{'s' if vacuous > 1 else ''}"] if vacuous else []) + (
        [f"{other} case error{'s' if other > 1 else ''}"] if other else []) + (
        ["vacuous: no framework compared"] if result.compared_no_framework else [])
    return "; " + ", ".join(parts) if parts else ""


def _report_progress(line: str) -> None:
    print(f"report: writing {line}", file=sys.stderr, flush=True)


JOBS_ENV = "RNN_HARNESS_JOBS"  # the default of --jobs (e.g. 1 in the harness's own tests)


def _jobs(value: int | None) -> int:
    """--jobs: 0 means one worker per CPU; not given: $RNN_HARNESS_JOBS, else one per CPU."""
    origin = "--jobs"  # the error names where the number came from
    if value is None:
        origin = JOBS_ENV
        text = os.environ.get(JOBS_ENV, "0").strip() or "0"
        try:
            value = int(text)
        except ValueError:
            raise HarnessError(f"expected a number of worker processes >= 0, got {text!r}",
                               field=JOBS_ENV) from None
    if value < 0:
        raise HarnessError(f"expected a number of worker processes >= 0 (0: one per CPU), "
                           f"got {value}", field=origin)
    return value or usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may use (a container or taskset may allow fewer than the machine
    has): ``--jobs 0``'s workers."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _process_seconds() -> float:
    """Seconds since harness was imported, on this process's one monotonic clock, so the final
    line counts the imports, the run and the report writing.

    Not /proc's process start against /proc/uptime: the two are different clocks wherever the
    boot clock is offset for the process (a time namespace, a restored VM or container
    snapshot), and their difference then overstates the run by the offset. The interpreter's
    own start, before ``import harness``, is a few hundredths of a second."""
    from harness import IMPORTED_AT

    return time.monotonic() - IMPORTED_AT
