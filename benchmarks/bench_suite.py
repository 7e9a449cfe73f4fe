"""Whole CPU suite: wall time and peak memory of ``rnn-harness run``, and the pytest speed-up
of running the conformance items in parallel (pytest-xdist).

    python benchmarks/bench_suite.py                # cases/, every CPU adapter
    python benchmarks/bench_suite.py --repeat 3     # best of 3 for each measurement
    python benchmarks/bench_suite.py --smoke        # one case, the reference adapters

Every measurement runs in a fresh process (imports included, as a user or CI sees it):

- ``python -m harness run cases --device cpu`` (one process; and ``--jobs 0``, one worker per
  CPU, when this harness has ``--jobs``);
- ``python -m pytest cases -m conformance --device cpu``, serial and with ``-n auto``: only the
  case x adapter items that the pytest plugin (``harness/pytest_plugin/``) collects from
  ``cases/``.

``pairs s`` is the run's own time for its pairs (``run.json``); the rest of its wall time is
start-up and writing the report (the HTML report's plots, mostly). Peak RSS is that of the
largest single process (``RUSAGE_CHILDREN``): with workers side by side the machine holds
several such processes at once. Times are the minimum over ``--repeat`` runs; exit code 1
means some pair diverged (a result, not a failure here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import ROOT, measured, print_facts, table, thread_env


def has_jobs_option() -> bool:
    out = subprocess.run([sys.executable, "-m", "harness", "run", "--help"], cwd=ROOT,
                         env=thread_env(None), capture_output=True, text=True)
    return "--jobs" in out.stdout


def best_of(cmd: list[str], repeat: int, threads: int | None) -> dict[str, float]:
    runs = [measured(cmd, thread_env(threads)) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["wall"])
    best["maxrss_kb"] = max(r["maxrss_kb"] for r in runs)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cases", default="cases", help="case files or folders (default cases)")
    ap.add_argument("--adapters", default=None, help="comma-separated (default: every CPU one)")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP/OPENBLAS/MKL/TF intra-op threads of every process (default: theirs)")
    ap.add_argument("--smoke", action="store_true",
                    help="cases/float64.yaml, reference adapters, no xdist run")
    args = ap.parse_args()
    if args.smoke:
        args.cases, args.adapters = "cases/float64.yaml", "reference,noise-floor"
    cases = args.cases.split(",")
    sel = ["--adapters", args.adapters] if args.adapters else []
    workers = len(os.sched_getaffinity(0))

    with tempfile.TemporaryDirectory() as tmp:
        run = [sys.executable, "-m", "harness", "run", *cases, "--device", "cpu", "--quiet",
               *sel]
        runs = {"run (1 process)": [*run, "--out", f"{tmp}/serial"]}
        if has_jobs_option():
            runs[f"run --jobs 0 ({workers} workers)"] = [*run, "--out", f"{tmp}/jobs", "--jobs",
                                                         "0"]
        pytest = [sys.executable, "-m", "pytest", *cases, "-q", "-m", "conformance",
                  "--device", "cpu", "-p", "no:cacheprovider", *sel]
        runs["pytest conformance, serial"] = pytest
        if not args.smoke:  # xdist's start-up alone is seconds
            runs[f"pytest conformance, -n auto ({workers} workers)"] = [*pytest, "-n", "auto"]
        results = {}
        for label, cmd in runs.items():
            print(f"  {label} ...", flush=True)
            results[label] = r = best_of(cmd, args.repeat, args.threads)
            if r["rc"] not in (0, 1):
                print(f"    exit {r['rc']}: {r['stderr_tail']}")
            if "--out" in cmd:  # the run's own timing of its pairs (run.json), the rest is
                run_json = Path(cmd[cmd.index("--out") + 1]) / "run.json"  # imports + report
                if run_json.exists():
                    r["pairs"] = json.loads(run_json.read_text()).get("seconds")

    print_facts([("repeat", str(args.repeat)), ("cases", " ".join(cases)),
                 ("threads", str(args.threads or "as the frameworks choose")),
                 ("adapters", args.adapters or "every CPU adapter")])
    rows = [[label, r["rc"], r["wall"], r.get("pairs", ""), r["cpu"], r["maxrss_kb"] / 1024,
             " ".join(cmd[1:]).replace(tmp, "$TMP")]
            for (label, r), cmd in zip(results.items(), runs.values(), strict=True)]
    print(table(rows, ["measurement", "exit", "wall s", "pairs s (run.json)", "cpu s (tree)",
                       "peak RSS MiB", "command (python ...)"]))
    serial = results["run (1 process)"]["wall"]
    for label, r in results.items():
        if label.startswith("run --jobs"):
            print(f"\nrun speed-up with --jobs 0: {serial / r['wall']:.2f}x")
    p1 = results["pytest conformance, serial"]["wall"]
    for label, r in results.items():
        if label.startswith("pytest conformance, -n"):
            print(f"pytest speed-up serial / -n auto: {p1 / r['wall']:.2f}x ({workers} usable "
                  "cores)")


if __name__ == "__main__":
    main()
