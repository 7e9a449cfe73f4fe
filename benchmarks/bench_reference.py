"""Forward time of the NumPy float64 reference vs PyTorch's CPU nn.LSTM / nn.GRU in float64,
measured in the same run with the same thread count for both (NumPy's OpenBLAS and torch).

    python benchmarks/bench_reference.py                # both shapes, 1 thread and all cores
    python benchmarks/bench_reference.py --quick        # fewer repeats
    python benchmarks/bench_reference.py --threads 1    # one thread count only
    python benchmarks/bench_reference.py --smoke        # tiny shapes, one repeat (tests)
    python benchmarks/bench_reference.py --threshold    # threads vs serial around the threshold

Shapes: B=32, T=100, D=H=256, 1 layer; seed 000's model (input 120, hidden 320, 5
bidirectional layers) at B=8, T=1000. Columns: ``reference`` = ``harness.reference.run``;
``torch`` = the nn.LSTM / nn.GRU module's forward (built once, no_grad, float64);
``torch-cpu adapter`` = the harness adapter's ``_run`` (builds the module each call, converts
in and out). ratio = reference / torch (<= 1: the reference is as fast or faster). Each time is
the minimum over ``--repeat`` rounds; ``max|ref-torch|`` checks they computed the same thing;
``reference plan`` is how the reference spread itself over the threads
(``harness.reference.parallel``: serial, a layer's directions side by side, or the input
projection computed ahead on a second thread).
With one thread the three alternate in this process. With more, each runs in processes of its
own (two rounds, alternating): two frameworks' thread pools alternating in one process disturb
each other on few cores (one still spinning when the other starts). The CPU-time ratio
(minimum CPU seconds, all threads) is the measure least disturbed by other work on a shared
machine with one thread; with more it also counts threads spinning while they wait.

``--threshold`` times the reference alone on shapes around ``parallel``'s size threshold, on
threads (the threshold lifted) and serial (BLAS alone with the same threads), each in processes
of its own, alternating: the figures ``MIN_ROWS`` and ``MIN_ROWS_HIDDEN2`` were chosen from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import _common  # noqa: F401  (puts the repository on sys.path)
import numpy as np
from _common import ROOT, interleaved_best, print_facts, set_threads, table, thread_env

from harness import data, params, reference
from harness.adapters.torch_cpu import TorchCPU
from harness.reference import parallel
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
THRESHOLD_SHAPES = [(8, 64), (128, 64), (2, 512), (8, 128), (16, 128), (4, 256), (8, 256),
                    (32, 128), (4, 512)]
"""(batch, hidden) for ``--threshold``: T = 100, input = hidden, 1 layer."""


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


def plan_of(case: Case, inputs) -> str:
    """How the reference spreads this case over the BLAS threads now, in words."""
    p = parallel.plan(inputs.x, case.batch, case.num_directions, case.hidden_size)
    if p == parallel.SERIAL:
        return "serial"
    words = [f"{case.num_directions} directions" if case.num_directions > 1 else "",
             f"{p.shards} batch shards" if p.shards > 1 else "",
             "projection ahead" if p.ahead else ""]
    return " x ".join(w for w in words if w)


def timed_functions(cell: str, label: str, which: tuple[str, ...]):
    """The functions to time (reference, torch, adapter) and max |y_ref − y_torch|."""
    case, canonical, inputs, native = setup(cell, label)
    fwd = torch_forward(case, native, inputs)
    adapter = TorchCPU()
    fns = {
        "reference": lambda: reference.run(case, canonical, inputs),
        "torch": fwd,
        "adapter": lambda: adapter._run(case, native, inputs),
    }
    err = float(np.abs(fns["reference"]().y - fwd()[0].numpy()).max())
    return {k: fns[k] for k in which}, err, plan_of(case, inputs)


def child(spec: str) -> None:
    """``--child cell,label,threads,which,repeat``: time one function in this process alone."""
    import torch  # noqa: F401  (so that set_threads reaches its thread pool too)

    cell, label, n, which, repeat = spec.split(",")
    set_threads(int(n))
    fns, err, plan = timed_functions(cell, label, (which,))
    next(iter(fns.values()))()  # warm-up
    cpu: dict[str, float] = {}
    wall = interleaved_best(fns, int(repeat), cpu)
    print(json.dumps({"wall": wall[which], "cpu": cpu[which], "err": err, "plan": plan}))


def in_processes(cell: str, label: str, n: int, repeat: int) -> tuple[dict, dict, float, str]:
    """Each function timed in processes of its own, alternating, two rounds: with several
    threads, a thread pool of the other framework spinning beside it would slow it down."""
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    err, plan = 0.0, ""
    for _ in range(2):
        for which in ("reference", "torch", "adapter"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", f"{cell},{label},{n},{which},{repeat}"],
                env=thread_env(n), cwd=ROOT, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            wall[which] = min(wall.get(which, float("inf")), r["wall"])
            cpu[which] = min(cpu.get(which, float("inf")), r["cpu"])
            err, plan = r["err"], r["plan"]
    return wall, cpu, err, plan


def threshold_child(spec: str) -> None:
    """``--threshold-child cell,directions,batch,hidden,mode,threads,repeat``: the reference
    alone, ``mode`` serial (BLAS's own threads) or threads (the size threshold lifted)."""
    cell, D, B, H, mode, n, repeat = spec.split(",")
    set_threads(int(n))
    case = Case(name="threshold", cell=cell, dtype="float64", initial_state="random",
                input_size=int(H), hidden_size=int(H), num_layers=1,
                bidirectional=D == "2", batch=int(B), seq_len=100)
    canonical, inputs = params.generate(case), data.generate(case)
    if mode == "serial":
        parallel.plan = lambda *args: parallel.SERIAL
    else:
        parallel.MIN_ROWS = parallel.MIN_HIDDEN = parallel.MIN_ROWS_HIDDEN2 = 0
    fn = {"reference": lambda: reference.run(case, canonical, inputs)}
    fn["reference"]()  # warm-up
    print(json.dumps({"wall": interleaved_best(fn, int(repeat))["reference"]}))


def threshold(cells: list[str], n: int, repeat: int) -> None:
    """Threads vs serial on THRESHOLD_SHAPES, each in processes of its own, two rounds."""
    set_threads(n)  # for parallel.plan's verdict below
    rows = []
    for cell in cells:
        for D in (1, 2):
            for B, H in THRESHOLD_SHAPES:
                best = {}
                for _ in range(2):
                    for mode in ("serial", "threads"):
                        out = subprocess.run(
                            [sys.executable, __file__, "--threshold-child",
                             f"{cell},{D},{B},{H},{mode},{n},{repeat}"],
                            env=thread_env(n), cwd=ROOT, capture_output=True, text=True,
                            check=True)
                        wall = json.loads(out.stdout.strip().splitlines()[-1])["wall"]
                        best[mode] = min(best.get(mode, float("inf")), wall)
                plan = parallel.plan(np.zeros(1), B, D, H)
                rows.append([cell, D, B, H, B * H * H, "serial" if plan == parallel.SERIAL
                             else "threads",
                             best["serial"] * 1e3, best["threads"] * 1e3,
                             best["threads"] / best["serial"]])
                print(f"  {cell} D={D} B={B} H={H}: ratio {rows[-1][-1]:.2f}", flush=True)
    print()
    print(table(rows, ["cell", "directions", "batch", "hidden", "rows x hidden²", "run() uses",
                       "serial ms", "threads ms", "ratio threads/serial"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (2 and 1)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, one repeat")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds per measurement (default 15 small, 3 seed000)")
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts (default: 1 and the usable cores)")
    ap.add_argument("--cells", default="lstm,gru")
    ap.add_argument("--threshold", action="store_true",
                    help="reference on threads vs serial around the size threshold")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--threshold-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    if args.threshold_child:
        threshold_child(args.threshold_child)
        return
    if args.threshold:
        n = int(args.threads or len(os.sched_getaffinity(0)))
        print_facts([("threads", f"{n} (BLAS alone when serial; one per thread when threaded)")])
        threshold(args.cells.split(","), n, args.repeat or (1 if args.quick else 5))
        return
    import torch

    cores = len(os.sched_getaffinity(0))
    threads = ([int(n) for n in args.threads.split(",")] if args.threads
               else [1] if args.smoke else sorted({1, cores}))
    shapes = SMOKE if args.smoke else SHAPES
    print_facts([("threads compared", ", ".join(map(str, threads))
                  + " (the same count for NumPy's BLAS and torch)")])
    rows = []
    for n in threads:
        set_threads(n)
        assert torch.get_num_threads() == n
        for cell in args.cells.split(","):
            for label in shapes:
                repeat = args.repeat or (1 if args.smoke else
                                         (2 if args.quick else 15) if label.startswith("B32")
                                         else (1 if args.quick else 3))
                if n == 1:  # interleaved in this process
                    fns, err, plan = timed_functions(cell, label,
                                                     ("reference", "torch", "adapter"))
                    cpu: dict[str, float] = {}
                    t = interleaved_best(fns, repeat, cpu)
                    how = "interleaved"
                else:
                    t, cpu, err, plan = in_processes(cell, label, n, repeat)
                    how = "own processes"
                rows.append([cell, label, n, how, repeat, plan, t["reference"], t["torch"],
                             t["reference"] / t["torch"], t["adapter"],
                             t["reference"] / t["adapter"], cpu["reference"] / cpu["torch"],
                             f"{err:.1e}"])
                print(f"  {cell} {label} threads={n}: ratio {rows[-1][8]:.3f}", flush=True)
    print()
    print(table(rows, ["cell", "shape", "threads", "timed", "repeat", "reference plan",
                       "reference s", "torch s",
                       "ratio ref/torch", "torch-cpu adapter s", "ratio ref/adapter",
                       "CPU-time ratio ref/torch", "max|ref-torch|"]))


if __name__ == "__main__":
    main()
