"""Peak memory of every CPU adapter on seed 000's model at full length, each in a process of
its own (target: under 2 GB each).

    python benchmarks/bench_memory.py                          # T=1000, B=8, every CPU adapter
    python benchmarks/bench_memory.py --adapters keras,torch-cpu --seq-len 500
    python benchmarks/bench_memory.py --smoke                  # T=20, B=2, reference adapters

The model is ``cases/seed000-acoustic-blstm.yaml`` (LSTM, input 120, hidden 320, 5
bidirectional layers, float32) with ``seq_len`` and ``batch`` overridden. Each adapter runs in
a fresh Python process that builds the case's weights and inputs, imports its framework, runs
``Adapter.run`` (layout conversion + ``_run`` + output checks) once and reports: resident memory
before the run (Python, NumPy, the data, and the framework: the availability check imports it),
peak resident memory of the process (``ru_maxrss``, the figure the target is about), the
increase during the run, and the run's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repository on sys.path)
from _common import ROOT, print_facts, table, thread_env

CASE_FILE = ROOT / "cases" / "seed000-acoustic-blstm.yaml"
CPU_ADAPTERS = ("reference", "noise-floor", "torch-cpu", "keras", "keras3", "tf-block",
                "tf-block-v2", "tf-legacy", "onnxruntime")
LIMIT_MB = 2000


def rss_mb() -> float:
    """Current resident set of this process, MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(adapter_name: str, seq_len: int, batch: int) -> None:
    """Run one adapter once and print a JSON line of its memory figures."""
    from harness import data, params
    from harness.adapters import get_adapter
    from harness.cases import load_cases

    case = load_cases(CASE_FILE)[0].model_copy(update={"seq_len": seq_len, "batch": batch})
    canonical, inputs = params.generate(case), data.generate(case)
    adapter = get_adapter(adapter_name)
    reason = adapter.not_applicable_reason(case) or adapter.unavailable_reason()
    if reason:
        print(json.dumps({"skipped": reason}))
        return
    before = rss_mb()
    t = time.perf_counter()
    out, _ = adapter.run(case, canonical, inputs)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out_mb = sum(a.nbytes for a in out.named().values()) / 2**20
    if out.y_layers is not None:
        out_mb += sum(a.nbytes for a in out.y_layers[:-1]) / 2**20
    print(json.dumps({"before": before, "peak": peak, "seconds": seconds, "outputs": out_mb,
                      "y_layers": out.y_layers is not None}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapters", default=",".join(CPU_ADAPTERS))
    ap.add_argument("--seq-len", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per adapter")
    ap.add_argument("--threads", type=int, default=None, help="threads for every framework")
    ap.add_argument("--smoke", action="store_true", help="T=20, B=2, reference adapters")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seq_len, args.batch)
        return
    if args.smoke:
        args.adapters, args.seq_len, args.batch = "reference,noise-floor", 20, 2

    rows, over = [], []
    for name in args.adapters.split(","):
        cmd = [sys.executable, __file__, "--child", name, "--seq-len", str(args.seq_len),
               "--batch", str(args.batch)]
        print(f"  {name} ...", flush=True)
        try:
            p = subprocess.run(cmd, env=thread_env(args.threads), cwd=ROOT, capture_output=True,
                               text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            rows.append([name, "timed out", "", "", "", "", ""])
            continue
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            rows.append([name, f"error (exit {p.returncode})", "", "", "", "",
                         p.stderr.strip().splitlines()[-1][:100] if p.stderr.strip() else ""])
            continue
        r = json.loads(lines[-1])
        if "skipped" in r:
            rows.append([name, "not run", "", "", "", "", r["skipped"][:100]])
            continue
        ok = r["peak"] < LIMIT_MB
        if not ok:
            over.append(name)
        rows.append([name, "ok" if ok else f"OVER {LIMIT_MB} MB", r["before"], r["peak"],
                     r["peak"] - r["before"], r["seconds"],
                     f"outputs {r['outputs']:.0f} MiB" + (" (all layers' y)" if r["y_layers"]
                                                         else "")])
    print_facts([("case", f"{CASE_FILE.relative_to(ROOT)} with seq_len={args.seq_len}, "
                          f"batch={args.batch}"),
                 ("threads", str(args.threads or "as the frameworks choose")),
                 ("cores", str(len(os.sched_getaffinity(0))))])
    print(table(rows, ["adapter", f"< {LIMIT_MB} MB", "RSS before run MiB", "peak RSS MiB",
                       "run adds MiB", "run s", "note"]))
    if over:
        print("\nover the target:", ", ".join(over))


if __name__ == "__main__":
    main()
