"""What every benchmark script prints and needs: machine facts, thread control, interleaved
best-of timing and the table.

Timings on a shared machine are noisy: every script runs the things it compares alternately,
``repeat`` rounds, and keeps each one's minimum (the run least disturbed by other work).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/x.py` from anywhere, installed or not
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads() -> int | None:
    """NumPy's BLAS threads as the environment sets them (None: the library's default)."""
    for var in BLAS_THREAD_VARIABLES:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def set_threads(n: int | None) -> None:
    """``n`` threads for PyTorch (intra-op); None leaves it alone. NumPy's BLAS reads its
    thread count from the environment when it loads (``OPENBLAS_NUM_THREADS``,
    ``OMP_NUM_THREADS``): run the script with them set, as :func:`thread_env` does for a
    subprocess; where they say otherwise than ``n``, this says so."""
    if n is None:
        return
    if blas_threads() != n:
        print(f"note: NumPy's BLAS keeps {blas_threads() or 'its default'} threads; set "
              f"OPENBLAS_NUM_THREADS={n} OMP_NUM_THREADS={n} before starting for {n}",
              file=sys.stderr)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def thread_env(n: int | None) -> dict[str, str]:
    """Environment for a subprocess with ``n`` threads everywhere (None: inherited)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if n is not None:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "TF_NUM_INTRAOP_THREADS"):
            env[var] = str(n)
    return env


def machine_facts() -> list[tuple[str, str]]:
    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {})
    facts = [
        ("command", " ".join([Path(sys.executable).name, *map(shlex.quote, sys.argv)])),
        ("cpu", cpu_model()),
        ("cores (nproc)", f"{len(os.sched_getaffinity(0))} usable of {os.cpu_count()}"),
        ("load average", " ".join(f"{x:.2f}" for x in os.getloadavg())),
        ("python", platform.python_version()),
        ("numpy", f"{np.__version__}, BLAS {blas.get('name', '?')} {blas.get('version', '')}, "
                  f"{blas_threads() or '?'} BLAS threads"),
    ]
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        facts.append(("torch", f"{torch.__version__}, {torch.get_num_threads()} threads "
                               f"(interop {torch.get_num_interop_threads()})"))
    return facts


def print_facts(extra: list[tuple[str, str]] = ()) -> None:
    print(tabulate([*machine_facts(), *extra], tablefmt="plain"))
    print()


def interleaved_best(fns: dict[str, Callable[[], object]], repeat: int,
                     cpu: dict[str, float] | None = None) -> dict[str, float]:
    """Minimum wall seconds of each function over ``repeat`` rounds, the functions alternating.

    ``cpu``, when given, receives each function's minimum CPU seconds of this process (all its
    threads): with one thread, the measure least disturbed by other processes on the machine.
    """
    best = dict.fromkeys(fns, float("inf"))
    best_cpu = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            c, t = time.process_time(), time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
            best_cpu[name] = min(best_cpu[name], time.process_time() - c)
    if cpu is not None:
        cpu.update(best_cpu)
    return best


def table(rows: list[list[object]], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, floatfmt=".4g", disable_numparse=False)


_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "wall": wall, "maxrss_kb": ru.ru_maxrss,
                  "cpu": ru.ru_utime + ru.ru_stime, "stderr_tail": p.stderr[-800:]}))
"""


def measured(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``cmd`` (stdout discarded) under a fresh watcher process: exit code ``rc``, ``wall``
    seconds, ``cpu`` seconds of the whole process tree, ``stderr_tail``, and ``maxrss_kb``: the
    peak resident set of the largest single process in the tree (Linux ``RUSAGE_CHILDREN``;
    workers running side by side add up, and this is not their sum)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], env=env or thread_env(None),
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
