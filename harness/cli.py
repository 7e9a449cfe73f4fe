"""Command line: ``python -m harness`` / ``rnn-harness``.

Exit codes: 0 all applicable pairs pass; 1 a pair diverged or errored; 2 bad input (one line
on stderr naming the file and field, never a traceback).
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import os
import signal
import sys
import threading
import time

from harness import __version__
from harness.errors import HarnessError, printable

EXIT_CODES = ("0: every applicable pair passed (or the command succeeded); 1: a pair diverged "
              "or failed (run, merge), a regression (diff), no explanation found (doctor); "
              "2: bad input, one line on stderr naming the file and field; 74: the output "
              "could not be written (standard output full or closed); 130: interrupted")


def _process_seconds() -> float:
    """Seconds since this process started (Linux: /proc; elsewhere since harness was imported),
    so the final line counts the interpreter, the imports and the report writing too."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        from harness import IMPORTED_AT

        return time.monotonic() - IMPORTED_AT


def _unknown(kind: str, names: str | list[str], known: list[str], field: str) -> HarnessError:
    """Unknown names (one or several), each with the closest known ones ("did you mean"), and
    all the known ones once."""
    each = []
    for name in [names] if isinstance(names, str) else names:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        if not close and len(name) >= 3:  # a short form: 'onnx' for onnxruntime
            close = [k for k in known if k.startswith(name.replace("_", "-"))][:3]
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        each.append(f"{name!r}{hint}")
    kinds = kind if len(each) == 1 else f"{kind}s"
    return HarnessError(f"unknown {kinds} {', '.join(each)}; known: {', '.join(known)}",
                        field=field)


def _check_adapters(names: list[str] | None, field: str = "--adapters") -> None:
    """Adapter names from the command line (None: none given): no empty name, no name twice
    (it would run and report the pairs twice), each one known (or "did you mean")."""
    from harness.adapters import ADAPTERS

    if names is None:
        return
    if not all(names):
        raise HarnessError(f"expected comma-separated adapter names, got {','.join(names)!r}",
                           field=field)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise HarnessError(f"{', '.join(twice)} named more than once", field=field)
    unknown = [n for n in names if n != "all" and n not in ADAPTERS]
    if unknown:  # every one at once, not one per attempt
        raise _unknown("adapter", unknown, list(ADAPTERS), field)


def _check_layout(name: str | None, field: str) -> None:
    from harness.layouts import LAYOUTS

    if name is not None and name not in LAYOUTS:
        raise _unknown("layout", name, list(LAYOUTS), field)


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


def _cmd_run(args: argparse.Namespace) -> int:
    from harness import adapters as registry
    from harness import cases as case_files
    from harness import memory, prepare, runner
    from harness.bundled import bundled_cases
    from harness.report import write_report
    from harness.report.folder import check_writable, report_names
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
    names = [n.strip() for n in args.adapters.split(",")] if args.adapters is not None else None
    _check_adapters(names)
    device, why = default_device(args.device, args.require_gpu,
                                 named=bool(names) and "all" not in names)
    chosen = registry.select(names, device)
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
    limit = memory.max_memory(args.max_memory, gpu_work=any(a.device == "gpu" for a in chosen))
    # before the run, not after it: every name the report writes
    check_writable(args.out, names=report_names([(c.name, a.name) for c in cases for a in chosen],
                                                outputs=args.save_outputs,
                                                models={a.name: a.saved_models for a in chosen}))
    for case in cases:  # bad input is exit 2 before anything runs, not an error row later
        prepare.check(case, limit)
    progress = None if args.quiet else runner.plain_progress
    result = runner.run(cases, chosen, progress=progress, keep_outputs=args.save_outputs,
                        timeout=args.timeout or None, isolate=args.isolate, max_memory=limit,
                        shard=shard, jobs=jobs, step_mode=args.step_mode, device=device)
    result.memory_limits = limit.record()  # run.json
    report_progress = None if args.quiet else _report_progress
    out = write_report(result, args.out, outputs=args.save_outputs, plots=args.plots,
                       progress=report_progress)
    where = f"shard {shard}: {len(result.pairs)} pair(s) of " if shard else ""
    print(printable(f"{where}{len(cases)} case(s), {len(chosen)} adapter(s): "
                    + _run_counts(result.pairs, chosen, why)
                    + f"; report in {out}/ (pairs {result.seconds:.1f} s; "
                    f"{_process_seconds():.1f} s in all)"))
    if result.failed:
        return 1
    if shard is None and not _compared_anything(result.pairs):
        return 1
    return 0


def default_device(device: str | None, require_gpu: bool = False,
                   named: bool = False) -> tuple[str, str]:
    """``run --device``, and a note for the summary line when the default left adapters out.
    Given: as given. By default the devices this machine has: the CPU adapters, and the GPU ones
    where :func:`harness.gpus.gpu_present` sees a GPU; every device with ``--require-gpu``
    (a GPU job names each GPU adapter that cannot run) or with adapters named one by one
    (``named``: a named GPU adapter is run, or reported unavailable, never dropped)."""
    from harness.gpus import gpu_present

    if device is not None:
        return device, ""
    if require_gpu or named:
        return "all", ""
    if gpu_present():
        return "all", ""
    return "cpu", "no GPU here: GPU adapters not selected (--device all reports them)"


def _counts(pairs: list) -> str:
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.status] = counts.get(p.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no pairs"


def _run_counts(pairs: list, chosen: list, why: str) -> str:
    """The summary line's counts: a run of CPU and GPU adapters gives the GPU pairs after the
    CPU counts (on a machine without a GPU they are all unavailable, and would swamp them); a
    default run on such a machine says the GPU adapters were left out."""
    gpu = {a.name for a in chosen if a.device == "gpu" and not a.baseline}
    if not gpu or len(gpu) == len([a for a in chosen if not a.baseline]):
        return _counts(pairs) + (f"; {why}" if why else "")
    cpu_pairs = [p for p in pairs if p.adapter not in gpu]
    gpu_pairs = [p for p in pairs if p.adapter in gpu]
    return f"{_counts(cpu_pairs)}; GPU pairs ({len(gpu)} adapter(s)): {_counts(gpu_pairs)}"


def _report_progress(line: str) -> None:
    print(f"report: writing {line}", file=sys.stderr, flush=True)


def _compared_anything(pairs: list) -> bool:
    """A run in which no pair compared anything (every pair a baseline, not applicable or
    unavailable, or no pair at all) tested nothing: it says so and exits 1, never 0."""
    from harness.compare import COMPARED

    if any(p.status in COMPARED for p in pairs):
        return True
    statuses = sorted({p.status for p in pairs})
    print(f"rnn-harness: nothing was compared: {len(pairs)} pair(s)"
          + (f", all {' or '.join(statuses)}" if statuses else "")
          + "; choose adapters (--adapters, --device, the cases' adapters/exclude) that can run "
            "here", file=sys.stderr)
    return False


def _cmd_init(args: argparse.Namespace) -> int:
    from harness.bundled import copy_bundled

    written = copy_bundled(args.dir)
    print(printable(f"copied {len(written)} bundled case file(s) to {args.dir}/; edit them, "
                    f"then `rnn-harness run {args.dir}`"))
    return 0


def _jobs(value: int) -> int:
    """--jobs: 0 means one worker per CPU."""
    if value < 0:
        raise HarnessError(f"expected a number of worker processes >= 0 (0: one per CPU), "
                           f"got {value}", field="--jobs")
    return value or usable_cpus()


def usable_cpus() -> int:
    """The CPUs this process may use (a container or taskset may allow fewer than the machine
    has): ``--jobs 0``'s workers."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cmd_merge(args: argparse.Namespace) -> int:
    from harness.merge import merge_reports
    from harness.report.folder import merge_folders

    out, option, shards = merge_folders(args.folders, args.out)
    merged = merge_reports(out, shards, allow_partial=args.allow_partial, plots=args.plots,
                           option=option)
    for line in merged.warnings:
        print(f"rnn-harness: warning: {line}", file=sys.stderr)
    print(f"merged {len(shards)} report(s) ({', '.join(merged.shards) or 'not shards'}): "
          + _counts(merged.result.pairs) + f"; report in {merged.out}/")
    # a merge that compared nothing tested nothing, as a run that compared nothing
    return 1 if merged.result.failed or not _compared_anything(merged.result.pairs) else 0


_FEATURES = ("peepholes", "projection", "cell_clip", "proj_clip", "gate_clip", "input_forget",
             "variable_lengths")


def _features(caps) -> str:
    """The features column: the boolean capabilities an adapter has, then ``gradients``, with the
    case features its backward pass is not compared for (``gradient_reasons``) in brackets."""
    names = [k for k in _FEATURES if getattr(caps, k) is True]
    if caps.gradients:
        excluded = " or ".join(sorted(caps.gradient_reasons))
        names.append(f"gradients (not with {excluded})" if excluded else "gradients")
    return ",".join(names)


def _cmd_adapters(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from harness.adapters import ADAPTERS
    from harness.isolation import unavailable_reason

    rows = []
    notes = []
    # asked once: an own-process adapter's is asked of a worker it starts
    reasons = {name: unavailable_reason(a) for name, a in ADAPTERS.items()}
    for a in ADAPTERS.values():
        reason = reasons[a.name]
        caps = a.capabilities.table()
        rows.append([a.name, a.device, "yes" if reason is None else f"no: {reason}",
                     a.layout_name or "-", caps["cells"], caps["directions"], caps["dtypes"],
                     _features(a.capabilities)])
        if a.capabilities.gradients:
            notes += [f"  {a.name} with {feature}: {why}"
                      for feature, why in sorted(a.capabilities.gradient_reasons.items())]
    if args.json or args.format == "json":
        print(json.dumps({a.name: {"available": reasons[a.name] is None,
                                   "reason": reasons[a.name], "device": a.device,
                                   "layout": a.layout_name, "capabilities": a.capabilities.table()}
                          for a in ADAPTERS.values()}, indent=2))
        return 0
    print(tabulate(rows, headers=["adapter", "device", "available", "layout", "cells", "directions",
                                  "dtypes", "features"], tablefmt="github"))
    if notes:
        print("\nGradients not compared (forward only) for cases with these features:")
        print("\n".join(notes))
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from harness.npz import write_text
    from harness.spec import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        write_text(args.output, text + "\n")
    else:
        print(text)
    return 0


def _cmd_layouts(args: argparse.Namespace) -> int:
    from harness.cases import load_cases
    from harness.layouts import LAYOUTS, get_layout
    from harness.report.layouts_md import mapping_markdown
    from harness.spec import Case

    if args.case:
        cases = load_cases(args.case)
    else:
        cases = [Case(name="example-lstm", cell="lstm", input_size=3, hidden_size=4),
                 Case(name="example-gru", cell="gru", input_size=3, hidden_size=4)]
    _check_layout(args.layout, "--layout")
    layouts = [get_layout(args.layout)] if args.layout else list(LAYOUTS.values())
    for layout in layouts:
        for case in cases:
            if case.cell in layout.cells:
                print(mapping_markdown(layout, case))
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    import math

    from harness.diff import diff_markdown, diff_reports, load_report
    from harness.npz import write_text

    if not (math.isfinite(args.factor) and args.factor > 1):
        raise HarnessError(f"expected a finite number > 1, got {args.factor:g}", field="--factor")
    if not (math.isfinite(args.ignore_below) and args.ignore_below >= 0):
        raise HarnessError(f"expected a finite number >= 0, got {args.ignore_below:g}",
                           field="--ignore-below")
    d = diff_reports(load_report(args.old), load_report(args.new), args.factor, args.ignore_below)
    if args.format == "json":
        from harness.diff import diff_dict

        text = json.dumps(diff_dict(d), indent=2, default=str) + "\n"
    else:
        text = diff_markdown(d)
    print(text, end="")
    if args.out:
        from harness.report.folder import add_entry

        write_text(args.out, text)
        add_entry(args.out)  # in a report folder: replaced with it by the next report
    return 1 if d.fails else 0  # a regression, or a known bug that looks fixed


def _cmd_convert(args: argparse.Namespace) -> int:
    from harness.convert import convert_file

    _check_layout(args.src, "--from")
    _check_layout(args.dst, "--to")
    for line in convert_file(args.case, args.src, args.dst, args.input, args.output,
                             name=args.name, select=args.select):
        print(printable(line))  # file names and the names read from the file
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from harness.doctor import doctor_file

    _check_layout(args.layout, "--layout")
    if args.adapter:
        _check_adapters([args.adapter], "--adapter")
    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise HarnessError(f"expected a finite number of seconds > 0, got {args.budget:g}",
                           field="--budget")
    text, code = doctor_file(args.case, args.weights, args.layout, expected=args.expected,
                             adapter=args.adapter, write_fixed=args.write_fixed, name=args.name,
                             select=args.select, budget_s=args.budget, fmt=args.format)
    print(text, end="")
    return code


def _cmd_probe(args: argparse.Namespace) -> int:
    from harness import runner
    from harness.probe import probe_file

    _check_adapters([args.adapter], "--adapter")
    text, code = probe_file(args.adapter, args.case, name=args.name, case_sizes=args.case_sizes,
                            progress=runner.plain_progress)
    print(text, end="")
    return code


def _plots_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plots", choices=["failed", "all", "none"], default="failed",
                        help="which pairs index.html draws plots for (default failed: the "
                             "pairs that did not pass, DIVERGED or an error with rows; all: "
                             "every pair with rows; none: no plots)")


def _epilog() -> str:
    """What --help lists besides the options: adapters, layouts, devices, exit codes."""
    import textwrap

    from harness.adapters import ADAPTERS
    from harness.layouts import LAYOUTS

    def wrapped(title: str, text: str) -> str:
        return title + "\n" + textwrap.fill(text, 88, initial_indent="  ", subsequent_indent="  ",
                                             break_on_hyphens=False)

    return "\n\n".join([
        wrapped("adapters (`rnn-harness adapters` says which can run here):",
                ", ".join(f"{a.name} [{a.device}]" for a in ADAPTERS.values())),
        wrapped("layouts (docs/layouts.md):", ", ".join(LAYOUTS)),
        wrapped("devices (--device):", "cpu, gpu, all (default: the devices this machine "
                "has, cpu plus gpu where nvidia-smi sees a GPU; all with --require-gpu or named "
                "--adapters; a "
                "selected adapter that cannot run here is reported unavailable)"),
        wrapped("exit codes:", EXIT_CODES),
    ])


def _format_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--format", choices=[default, "json"], default=default,
                        help=f"output format (default {default})")


def build_parser() -> argparse.ArgumentParser:
    epilog = _epilog()
    raw = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(prog="rnn-harness",
                                description="Cross-framework LSTM/GRU conformance harness",
                                epilog=epilog, formatter_class=raw)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run cases through adapters and write a report folder",
                       epilog=epilog, formatter_class=raw)
    r.add_argument("cases", nargs="*", help="case files or folders (default: the bundled cases, "
                   "which `rnn-harness init DIR` copies out)")
    r.add_argument("--builtin", action="store_true",
                   help="run the bundled cases (the default when no CASES are given)")
    r.add_argument("--adapters", help="comma-separated adapter names (default: every adapter "
                   "of the devices --device selects)")
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
    r.add_argument("--quiet", action="store_true", help="no progress lines")
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
    r.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="run cases in N worker processes side by side (default 1: all in this "
                        "process; 0: one per CPU); each worker prepares a case and runs its "
                        "pairs, importing each framework once (about 7 s and its memory per "
                        "worker); thread pools are left as they are, since their size changes "
                        "results in the last bits; the report is the same as with --jobs 1, in "
                        "the same order")
    r.add_argument("--step-mode", choices=("auto", "on", "off"), default="auto",
                   help="also run each layer one step at a time from the reference's own "
                        "states and report the one-step error (rows with mode step; "
                        "docs/equations.md, Step-local divergence): auto (default) for "
                        "float32/float16/bfloat16 pairs that did not pass free-running, on for "
                        "every pair, off never")
    r.add_argument("--require-gpu", action="store_true",
                   help="exit 1 before running, naming each selected GPU adapter that cannot run "
                        "here and why (or saying none is selected), instead of reporting them "
                        "unavailable: a GPU CI job must not pass without GPU work")
    _plots_option(r)
    r.set_defaults(func=_cmd_run)

    m = sub.add_parser("merge", help="combine the report folders of `run --shard K/N` into one",
                       usage="rnn-harness merge SHARD_DIR... --out OUT_DIR [options]\n"
                             "       rnn-harness merge OUT_DIR SHARD_DIR... [options]",
                       description="Combine shard report folders into one report folder, as if "
                       "the pairs had run in one `run`: divergence.csv rows and run.json pairs in "
                       "the unsharded order, summary.md, layouts.md and index.html regenerated, "
                       "errors.log and outputs/ combined, timings summed, each shard's versions "
                       "kept (a warning in summary.md when they differ). Refuses (exit 2) shards "
                       "of different runs, a pair in two folders, and an incomplete set of "
                       "shards. Exit 0 when every applicable pair passes, 1 when one diverged or "
                       "failed.")
    m.add_argument("folders", metavar="FOLDER", nargs="+",
                   help="the shards' report folders; without --out the first folder given is "
                        "the merged report folder (`merge OUT_DIR SHARD_DIR...`)")
    m.add_argument("--out", metavar="OUT_DIR",
                   help="the merged report folder (`merge SHARD_DIR... --out OUT_DIR`)")
    m.add_argument("--allow-partial", action="store_true",
                   help="merge even when shards are missing (or the folders are not shards of "
                        "one run); the report says which are missing")
    _plots_option(m)
    m.set_defaults(func=_cmd_merge)

    ini = sub.add_parser("init", help="copy the bundled case files into a folder to edit")
    ini.add_argument("dir", metavar="DIR", help="the folder (created; existing files are never "
                     "overwritten)")
    ini.set_defaults(func=_cmd_init)

    a = sub.add_parser("adapters", help="list adapters, availability and capabilities")
    a.add_argument("--json", action="store_true", help="same as --format json")
    _format_option(a, "text")
    a.set_defaults(func=_cmd_adapters)

    s = sub.add_parser("schema", help="print the JSON Schema of case files")
    s.add_argument("--output", "-o", help="write to this file instead of stdout")
    s.set_defaults(func=_cmd_schema)

    la = sub.add_parser("layouts", help="print layout mapping tables")
    la.add_argument("--layout", help="one layout (default: all)")
    la.add_argument("--case", help="a case file whose sizes to use")
    la.set_defaults(func=_cmd_layouts)

    d = sub.add_parser("diff", help="compare two report folders; exit 1 on a regression or a "
                                     "known upstream bug that looks fixed")
    d.add_argument("old", help="the earlier report folder")
    d.add_argument("new", help="the later report folder")
    d.add_argument("--factor", type=float, default=10.0,
                   help="a row whose max_abs grew more than this is a regression (default 10)")
    d.add_argument("--ignore-below", type=float, default=1.0, metavar="R",
                   help="ignore growth on rows within R x tolerance in both runs (default 1)")
    d.add_argument("--out", help="also write the markdown (or JSON) to this file")
    _format_option(d, "markdown")
    d.set_defaults(func=_cmd_diff)

    cv = sub.add_parser("convert", help="convert native weights between layouts")
    cv.add_argument("--case", help="the case file (sizes and semantics); default: read from IN "
                    "where it holds them (.pt, .onnx, .h5, .keras, .msgpack)")
    cv.add_argument("--from", dest="src", metavar="LAYOUT",
                    help="layout of IN (default: the file's own; needed with --case)")
    cv.add_argument("--to", dest="dst", metavar="LAYOUT",
                    help="layout of an .npz OUT (a .pt, .onnx, .weights.h5 or .msgpack OUT is "
                    "the framework's own)")
    cv.add_argument("input", metavar="IN", help="weights: .npz, or a PyTorch .pt/.pth state_dict, "
                    "a Keras .h5/.keras model, an ONNX model, flax .msgpack parameters")
    cv.add_argument("output", metavar="OUT", help="the converted weights: .pt (state_dict for "
                    "torch.nn.LSTM/GRU.load_state_dict), .onnx (a model of the LSTM/GRU "
                    "nodes), .weights.h5 (Keras 3 model.load_weights), .msgpack "
                    "(flax.serialization.from_bytes) or .npz (native tensors)")
    cv.add_argument("--name", help="the case to use when the file expands to several")
    cv.add_argument("--select", help="which module (torch prefix), layers (Keras names) or "
                    "nodes (ONNX names) of IN to read")
    cv.set_defaults(func=_cmd_convert)

    dr = sub.add_parser("doctor", help="find the layout mistake that reproduces some outputs")
    dr.add_argument("--case", required=True, help="the case file (sizes, semantics, inputs)")
    dr.add_argument("--weights", required=True, metavar="IN", help="the weights file")
    dr.add_argument("--layout", required=True, metavar="CLAIMED",
                    help="the layout the weights are believed to be in")
    truth = dr.add_mutually_exclusive_group(required=True)
    truth.add_argument("--expected", metavar="OUT.npz", help="the outputs the weights really give "
                       "(y, optionally h_n, c_n)")
    truth.add_argument("--adapter", metavar="NAME", help="run this adapter on the weights read "
                       "as its own layout: its framework is the source of truth")
    dr.add_argument("--write-fixed", metavar="FIXED.npz",
                    help="write the corrected weights in the claimed layout")
    dr.add_argument("--name", help="the case to use when the file expands to several")
    dr.add_argument("--select", help="as for convert")
    dr.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                    help="stop searching after this long (default 60)")
    _format_option(dr, "markdown")
    dr.set_defaults(func=_cmd_doctor)

    pr = sub.add_parser("probe",
                        help="measure an adapter's layout and compare with the declared one")
    pr.add_argument("--adapter", required=True)
    pr.add_argument("--case", help="a case file (default: LSTM and GRU, H=2, I=2)")
    pr.add_argument("--name", help="one case of the file")
    pr.add_argument("--case-sizes", action="store_true",
                    help="probe at the case's own sizes (default: I 2, H 3, P 2, at most 2 "
                         "layers, which show the same layout; a probe is one framework run per "
                         "native entry)")
    pr.set_defaults(func=_cmd_probe)
    return p


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that the run unwinds like Ctrl-C: worker processes
    stopped, the partial report folder removed, the previous report left as it was."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


class OutputError(Exception):
    """Standard output could not be written (a full disk, /dev/full): not bad input."""


class _Stdout:
    """``sys.stdout`` during a command: a failed write is an :class:`OutputError`, told apart
    from the OSErrors of the files the command reads and writes."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


_OUTPUT_FAILED = False  # standard output failed: entry() ends the process without flushing it


def main(argv: list[str] | None = None) -> int:
    from harness.scratch import scratch

    parser = build_parser()
    args = parser.parse_args(argv)
    previous = None
    # an inherited "ignore" (nohup-style wrappers) is kept, as Python keeps an ignored SIGINT
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN):
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    stdout = sys.stdout
    sys.stdout = _Stdout(stdout)
    try:
        with scratch():  # the frameworks' config and caches: nothing written outside the paths
            return _main(args)
    finally:
        sys.stdout = stdout
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupted(how: str) -> str:
    """The last line of an interrupted command: what its report folder holds now."""
    folder = sys.modules.get("harness.report.folder")  # not imported: no report was begun
    note = folder.interrupted_note() if folder else "nothing of this run was written"
    return f"rnn-harness: interrupted ({how}): {note}"


def _main(args: argparse.Namespace) -> int:
    global _OUTPUT_FAILED
    folder = sys.modules.get("harness.report.folder")
    if folder:  # an earlier command in this process (tests call main repeatedly)
        folder.reset_state()
    try:
        code = args.func(args)
        sys.stdout.flush()
        return code
    except OutputError as exc:
        _OUTPUT_FAILED = True
        print(f"rnn-harness: error: cannot write to standard output: {exc} (files the command "
              "wrote are complete)", file=sys.stderr)
        return 74
    except HarnessError as exc:
        print(f"rnn-harness: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(_interrupted("SIGINT"), file=sys.stderr)
        return 130
    except Terminated:
        print(_interrupted("SIGTERM"), file=sys.stderr)
        return 143
    except OSError as exc:  # a path that cannot be written (read-only, under a file, disk full)
        where = f"{exc.filename}: " if exc.filename else ""
        print(printable(f"rnn-harness: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return 2


def entry() -> None:
    """The console entry point (``rnn-harness``, ``python -m harness``): :func:`main`, then the
    exit. When an adapter call abandoned by a timeout or an interrupt is still running in a
    thread, the process ends with ``os._exit`` once its output is flushed: interpreter shutdown
    with framework code running in a thread can abort the process (SIGABRT, exit 134) after the
    report was written."""
    code = main()
    from harness.isolation import abandoned_calls

    # a standard output that failed would fail again at interpreter shutdown ("Exception
    # ignored", exit 120): end without flushing it
    if abandoned_calls() or _OUTPUT_FAILED:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
