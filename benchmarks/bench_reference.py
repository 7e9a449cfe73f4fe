"""Forward time of the NumPy float64 reference vs PyTorch's CPU nn.LSTM / nn.GRU in float64,
measured with the same thread count for both (NumPy's OpenBLAS and torch).

    python benchmarks/bench_reference.py                # both shapes, 1 thread and all cores
    python benchmarks/bench_reference.py --quick        # fewer repeats
    python benchmarks/bench_reference.py --threads 1    # one thread count only
    python benchmarks/bench_reference.py --smoke        # tiny shapes, one repeat (tests)

Shapes: B=32, T=100, D=H=256, 1 layer; seed 000's model (input 120, hidden 320, 5
bidirectional layers) at B=8, T=1000. Columns: ``reference`` = ``harness.reference.run``;
``torch`` = the nn.LSTM / nn.GRU module's forward (built once, no_grad, float64);
``torch-cpu adapter`` = the harness adapter's ``_run`` (builds the module each call, converts
in and out). ratio = reference / torch (<= 1: the reference is as fast or faster). Each time is
the minimum over ``--repeat`` rounds; ``max|ref-torch|`` checks they computed the same thing.
Every measurement runs in a process of its own, started with ``OMP_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to the thread count (and
``torch.set_num_threads`` in it). With one thread the three alternate in one process. With
more, each runs in processes of its own (two rounds, alternating): two frameworks' thread pools
alternating in one process disturb each other on few cores (one still spinning when the other
starts). The CPU-time ratio (minimum CPU seconds, all threads) is the measure least disturbed by
other work on a shared machine with one thread; with more it also counts threads spinning while
they wait.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common  # noqa: F401  (puts the repository on sys.path)
import numpy as np
from _common import ROOT, interleaved_best, print_facts, table, thread_env

from harness import data, params, reference
from harness.adapters.torch_cpu import TorchCPU
from harness.spec import Case

SHAPES = {
    "B32-T100-H256": dict(input_size=256, hidden_size=256, num_layers=1, batch=32, seq_len=100),
    "seed000-B8-T1000": dict(input_size=120, hidden_size=320, num_layers=5, bidirectional=True,
                             batch=8, seq_len=1000),
}
SMOKE = {
    "smoke-B4-T8-H16": dict(input_size=8, hidden_size=16, num_layers=2, bidirectional=True,
                            batch=4, seq_len=8),
}
def torch_forward(case: Case, native: dict[str, np.ndarray], inputs):
    """A closure running the prebuilt module's forward on prebuilt tensors."""
    import torch

    module = TorchCPU().build(case, native)
    x, h0 = torch.from_numpy(inputs.x), torch.from_numpy(inputs.h0)
    state = (h0, torch.from_numpy(inputs.c0)) if case.cell == "lstm" else h0

    def run():
        with torch.no_grad():
            return module(x, state)

    return run


def setup(cell: str, label: str):
    shape = {**SHAPES, **SMOKE}[label]
    case = Case(name=label, cell=cell, dtype="float64", initial_state="random", **shape)
    canonical, inputs = params.generate(case), data.generate(case)
    native = TorchCPU().layout.to_native(canonical, case)
    return case, canonical, inputs, native


def timed_functions(cell: str, label: str, which: tuple[str, ...]):
    """The functions to time (of reference, torch, adapter) and max |y_ref − y_torch|."""
    case, canonical, inputs, native = setup(cell, label)
    fwd = torch_forward(case, native, inputs)
    adapter = TorchCPU()
    fns = {
        "reference": lambda: reference.run(case, canonical, inputs),
        "torch": fwd,
        "adapter": lambda: adapter._run(case, native, inputs),
    }
    err = float(np.abs(fns["reference"]().y - fwd()[0].numpy()).max())
    return {k: fns[k] for k in which}, err


WHICH = ("reference", "torch", "adapter")


def child(spec: str) -> None:
    """``--child cell,label,threads,which,repeat``: time one function (``which``), or all three
    alternating (``all``), in this process, started with the thread count in its environment."""
    import torch

    cell, label, n, which, repeat = spec.split(",")
    torch.set_num_threads(int(n))
    fns, err = timed_functions(cell, label, WHICH if which == "all" else (which,))
    if which != "all":
        next(iter(fns.values()))()  # warm-up
    cpu: dict[str, float] = {}
    wall = interleaved_best(fns, int(repeat), cpu)
    print(json.dumps({"wall": wall, "cpu": cpu, "err": err}))


def in_child(cell: str, label: str, n: int, which: str, repeat: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", f"{cell},{label},{n},{which},{repeat}"],
        env=thread_env(n), cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def in_processes(cell: str, label: str, n: int, repeat: int) -> tuple[dict, dict, float]:
    """Each function timed in processes of its own, alternating, two rounds: with several
    threads, a thread pool of the other framework spinning beside it would slow it down."""
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    err = 0.0
    for _ in range(2):
        for which in WHICH:
            r = in_child(cell, label, n, which, repeat)
            wall[which] = min(wall.get(which, float("inf")), r["wall"][which])
            cpu[which] = min(cpu.get(which, float("inf")), r["cpu"][which])
            err = r["err"]
    return wall, cpu, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (2 and 1)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds per measurement (default 15 small, 3 seed000)")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts (default: 1 and the usable cores)")
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    cores = len(os.sched_getaffinity(0))
    threads = ([int(n) for n in args.threads.split(",")] if args.threads
               else [1] if args.smoke else sorted({1, cores}))
    shapes = SMOKE if args.smoke else SHAPES
    print_facts([("threads compared", ", ".join(map(str, threads))
                  + " (the same count for NumPy's BLAS and torch)")])
    rows = []
    for n in threads:
        for cell in args.cells.split(","):
            for label in shapes:
                repeat = args.repeat or (1 if args.smoke else
                                         (2 if args.quick else 15) if label.startswith("B32")
                                         else (1 if args.quick else 3))
                if n == 1:  # interleaved in one process
                    r = in_child(cell, label, n, "all", repeat)
                    t, cpu, err = r["wall"], r["cpu"], r["err"]
                    how = "interleaved"
                else:
                    t, cpu, err = in_processes(cell, label, n, repeat)
                    how = "own processes"
                rows.append([cell, label, n, how, repeat, t["reference"], t["torch"],
                             t["reference"] / t["torch"], t["adapter"],
                             t["reference"] / t["adapter"], cpu["reference"] / cpu["torch"],
                             f"{err:.1e}"])
                print(f"  {cell} {label} threads={n}: ratio {rows[-1][7]:.3f}", flush=True)
    print()
    print(table(rows, ["cell", "shape", "threads", "timed", "repeat", "reference s", "torch s",
                       "ratio ref/torch", "torch-cpu adapter s", "ratio ref/adapter",
                       "CPU-time ratio ref/torch", "max|ref-torch|"]))


if __name__ == "__main__":
    main()
