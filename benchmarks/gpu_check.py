"""One command that checks the GPU path on a GPU runner and writes every figure to one file.

    python benchmarks/gpu_check.py                  # writes to $OUT, else reports/gpu-check/
    python benchmarks/gpu_check.py --out DIR --budget 280

Run from the repository root (installed or not: the harness runs as ``python -m harness`` with
the repository on PYTHONPATH). Phases, each in a process of its own with a timeout taken from
one overall budget (default 285 s; pytest gets what the others leave), so the whole check ends
in under 5 minutes even if one hangs; a phase that fails or times out is recorded and the next
one still runs:

1. ``gpu``: does torch (or CuPy) see a CUDA device? If not, the check says so and exits 2.
2. ``adapters``: ``python -m harness adapters`` (printed).
3. ``suite``: ``python -m harness run cases cases-gpu --require-gpu`` with default options
   (what ``tox -e gpu`` runs): exit code, pairs by verdict, the error rows, and seed000-full's
   phases from run.json (prepare, each adapter). If it was refused before running anything
   (an older memory guard), ``suite-64GiB`` reruns it with ``--max-memory 64GiB``; if
   seed000-full still has no figures, ``seed000-full`` runs it alone (each time permitting).
4. ``timing``: on seed 000's model (5 bidirectional layers, input 120, hidden 320) at B=32,
   T=1000, float64, same weights: cuDNN's ``nn.LSTM`` forward and forward+backward against the
   GPU reference (adapter ``reference-cuda``) forward and forward+backward, and their largest
   difference.
5. ``pytest``: ``python -m pytest -q -n <usable cores> --require-gpu tests``: a test marked
   ``gpu`` that skips fails (tests/conftest.py), so the GPU tests cannot pass by skipping.

Writes ``gpu_check.json`` (every figure, each phase's exit code, seconds and output tail) and
``gpu_check.txt`` (a short summary) after every phase, so a check cut short keeps what it had.
Exit code: 0 when every phase passed, 1 when one failed, 2 when there is no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_GPU_EXIT = 2
SEED000_FULL = "seed000-acoustic-blstm-full"

# caps per phase, in seconds; each also gets no more than what is left of the budget. pytest
# gets what is left (it took 86-93 s with -n 14 on an H100 runner), and at least PYTEST_RESERVE
# is kept for it: the fallback runs only with time to spare
CAPS = {"gpu": 45, "adapters": 30, "suite": 130, "suite-64GiB": 130, "seed000-full": 60,
        "timing": 50}
PYTEST_RESERVE = 100


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Check:
    """The phases' results, written to ``out`` after each one."""

    def __init__(self, out: Path, budget: float) -> None:
        self.out = out
        self.deadline = time.monotonic() + budget
        self.doc: dict = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(), "platform": platform.platform(),
            "cores": usable_cores(), "budget_s": budget, "phases": {},
        }

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, cmd: list[str], cap: float | None = None) -> dict:
        """Run ``cmd`` with a timeout; the whole process group is killed when it expires."""
        timeout = max(1.0, min(cap if cap is not None else CAPS.get(name, 60), self.left()))
        print(f"\n=== {name}: {' '.join(cmd)} (timeout {timeout:.0f} s)", flush=True)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            output, _ = proc.communicate()
        seconds = time.perf_counter() - start
        phase = {"cmd": cmd, "rc": proc.returncode, "timed_out": timed_out,
                 "timeout_s": round(timeout, 1), "seconds": round(seconds, 2),
                 "output_tail": (output or "")[-6000:]}
        print((output or "")[-4000:], end="" if (output or "").endswith("\n") else "\n")
        print(f"=== {name}: exit {proc.returncode}{' (TIMED OUT)' if timed_out else ''}, "
              f"{seconds:.1f} s", flush=True)
        self.doc["phases"][name] = phase
        self.write()
        return phase

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.doc, indent=2, default=str)
                                                 + "\n")
        (self.out / "gpu_check.txt").write_text(summary(self.doc))


def _json_lines(output: str) -> dict:
    """Every ``{...}`` line of a phase's output merged (later keys win)."""
    found: dict = {}
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                found.update(json.loads(line))
            except ValueError:
                pass
    return found


# Phase bodies run in their own process: ``gpu_check.py --phase NAME`` ------------------------

def phase_gpu() -> None:
    info: dict = {}
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda_build"] = str(torch.version.cuda)
        info["torch_cuda_available"] = bool(torch.cuda.is_available())
        if info["torch_cuda_available"]:
            info["gpu"] = torch.cuda.get_device_name(0)
            free, total = torch.cuda.mem_get_info(0)
            info["gpu_memory_free_bytes"], info["gpu_memory_total_bytes"] = free, total
            info["cudnn"] = str(torch.backends.cudnn.version())
    except Exception as exc:
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import cupy

        info["cupy"] = cupy.__version__
        info["cupy_devices"] = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        info["cupy_error"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(info), flush=True)


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def phase_timing(batch: int, seq_len: int, device: str = "cuda") -> None:
    """cuDNN float64 vs the GPU reference on seed 000's model; one JSON line per figure.
    ``device="cpu"``: the same code on torch's CPU nn.LSTM and the NumPy reference, a dry run
    for tests on a machine without a GPU."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch

    from harness.adapters.reference import Reference
    from harness.adapters.reference_cuda import ReferenceCUDA, backend
    from harness.adapters.torch_cudnn import TorchCuDNN, cudnn_rnn_tf32
    from harness.cases import load_cases
    from harness.layouts import get_layout
    from harness.prepare import load_inputs, load_weights

    def emit(**kv) -> None:
        print(json.dumps(kv, default=str), flush=True)

    full = load_cases(ROOT / "cases-gpu" / "seed000-full.yaml")[0]
    grad_case = full.model_copy(update={"dtype": "float64", "gradients": True,
                                        "batch": batch, "seq_len": seq_len})
    fwd_case = grad_case.model_copy(update={"gradients": False})
    canonical = load_weights(grad_case)
    inputs = load_inputs(grad_case)
    on_gpu = device == "cuda"
    emit(shape=f"B={batch} T={seq_len} I={full.input_size} H={full.hidden_size} "
               f"L={full.num_layers} bidirectional float64", device=device,
         reference_backend=backend().framework if on_gpu else "numpy")

    native = get_layout("torch").to_native(canonical, grad_case, np.float64)
    cudnn = TorchCuDNN()
    cudnn.torch_device = device
    module = cudnn.build(grad_case, native)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    def synchronize() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    x, h0, c0 = dev(inputs.x), dev(inputs.h0), dev(inputs.c0)
    dy, dh, dc = dev(inputs.dy), dev(inputs.dh_n), dev(inputs.dc_n)
    y_cudnn = None

    def cudnn_forward():
        nonlocal y_cudnn
        module.eval()
        with torch.no_grad():
            y_cudnn, _ = module(x, (h0, c0))
        synchronize()

    def cudnn_backward():
        module.train()
        xg, hg, cg = (t.clone().requires_grad_(True) for t in (x, h0, c0))
        module.zero_grad(set_to_none=True)
        y, (h_n, c_n) = module(xg, (hg, cg))
        ((y * dy).sum() + (h_n * dh).sum() + (c_n * dc).sum()).backward()
        synchronize()

    with cudnn_rnn_tf32(torch, False):
        cudnn_forward()  # warm-up: cuDNN plans, allocator
        cudnn_backward()
        emit(cudnn_forward_s=_best(cudnn_forward, 3))
        emit(cudnn_forward_backward_s=_best(cudnn_backward, 3))

    reference = ReferenceCUDA() if on_gpu else Reference()
    t = time.perf_counter()
    out = reference._run(fwd_case, canonical.tensors, inputs)
    emit(reference_forward_first_s=time.perf_counter() - t)  # with CuPy's kernel compiles
    emit(reference_forward_s=_best(lambda: reference._run(fwd_case, canonical.tensors, inputs),
                                   1))
    emit(max_abs_y_reference_vs_cudnn=float(np.max(np.abs(
        out.y - y_cudnn.detach().cpu().numpy()))))
    t = time.perf_counter()
    reference._run(grad_case, canonical.tensors, inputs)
    emit(reference_forward_backward_s=time.perf_counter() - t)


# Reading the phases ------------------------------------------------------------------------

def read_run_json(path: Path) -> dict:
    """Pairs by verdict, the error rows, and seed000-full's phases, from a run's run.json."""
    run = json.loads(path.read_text())
    counts: dict[str, int] = {}
    for p in run.get("pairs", []):
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    errors = [f"{p['case']}::{p['adapter']}: {p.get('reason', '')}"
              for p in run.get("pairs", []) if p["status"] == "error"]
    full = {"prepare_s": run.get("cases", {}).get(SEED000_FULL, {}).get("prepare_seconds")}
    for p in run.get("pairs", []):
        if p["case"] == SEED000_FULL:
            full[f"{p['adapter']}_s"] = p["seconds"]
            full[f"{p['adapter']}_status"] = p["status"]
    return {"cases": len(run.get("cases", {})), "pairs": counts, "error_rows": errors,
            "seed000_full": full if len(full) > 1 else None,
            "seconds": run.get("seconds"), "versions": run.get("versions"),
            "limits": run.get("memory_limits")}


def read_pytest(output: str) -> dict:
    tail = [ln for ln in output.splitlines() if ln.strip()]
    last = tail[-1] if tail else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|"
                                               r"xpassed|deselected)", last)}
    failed = [ln for ln in output.splitlines() if ln.startswith(("FAILED ", "ERROR "))]
    return {"summary": last.strip("= "), "counts": counts, "failed": failed[:50]}


def summary(doc: dict) -> str:
    lines = [f"gpu_check ({doc['started']}, {doc['cores']} cores, python {doc['python']})"]
    gpu = doc.get("gpu") or {}
    if gpu:
        lines.append("gpu: " + ", ".join(f"{k}={v}" for k, v in gpu.items()))
    for name, p in doc["phases"].items():
        state = "TIMED OUT" if p["timed_out"] else f"exit {p['rc']}"
        lines.append(f"{name:13s} {state:10s} {p['seconds']:7.1f} s")
    for key in ("suite", "seed000_full", "timing", "pytest"):
        if doc.get(key) is not None:
            lines.append(f"{key}: {json.dumps(doc[key], default=str)}")
    if "verdict" in doc:
        lines.append(f"verdict: {doc['verdict']}")
    return "\n".join(lines) + "\n"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "reports" / "gpu-check"),
                    help="folder for gpu_check.json and gpu_check.txt (default: $OUT, else "
                         "reports/gpu-check)")
    ap.add_argument("--budget", type=float, default=285.0,
                    help="seconds for all phases together (default 285)")
    ap.add_argument("--phase", choices=("gpu", "timing"), help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    ap.add_argument("--seq-len", type=int, default=1000, help=argparse.SUPPRESS)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _no_gpu(gpu: dict) -> str | None:
    """The verdict where the probe saw no CUDA device (neither torch nor CuPy), else None."""
    if gpu.get("torch_cuda_available") or gpu.get("cupy_devices"):
        return None
    why = "; ".join(str(gpu[k]) for k in ("torch_error", "cupy_error") if k in gpu)
    torch_said = (f"torch {gpu['torch']} (CUDA build: {gpu['torch_cuda_build']}) sees no "
                  f"CUDA device" if "torch" in gpu else "")
    return "no GPU: " + "; ".join(filter(None, [torch_said, why])) + \
           " - this check needs a CUDA GPU runner"


def _suite_phases(check: Check, py: str, problems: list[str]) -> None:
    """The cases on the GPU (with 64 GiB where the default run was refused before running),
    and seed000's full size alone where the suite did not record it."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "suite"
        suite = check.run("suite", [py, "-m", "harness", "run", "cases", "cases-gpu",
                                    "--require-gpu", "--out", str(report)])
        if (not (report / "run.json").is_file() and not suite["timed_out"]
                and check.left() > CAPS["suite-64GiB"] + CAPS["timing"] + PYTEST_RESERVE):
            # refused before running (e.g. the memory guard): what does the GPU path give with
            # room enough? Recorded apart; the default run's exit code still counts
            check.run("suite-64GiB", [py, "-m", "harness", "run", "cases", "cases-gpu",
                                      "--require-gpu", "--max-memory", "64GiB",
                                      "--out", str(report)])
            check.doc["suite_with_64GiB"] = True
        if (report / "run.json").is_file():
            shutil.copy(report / "run.json", check.out / "suite-run.json")
            check.doc["suite"] = read_run_json(report / "run.json")
        if suite["rc"] != 0 or suite["timed_out"]:
            problems.append(f"suite exited {suite['rc']}" + (" (timed out)"
                                                            if suite["timed_out"] else ""))
        if (check.doc.get("suite") or {}).get("error_rows"):
            problems.append(f"{len(check.doc['suite']['error_rows'])} error row(s) in the suite")
        full = (check.doc.get("suite") or {}).get("seed000_full")
        if full is None and check.left() > CAPS["seed000-full"] + CAPS["timing"] + PYTEST_RESERVE:
            alone = Path(tmp) / "seed000-full"
            check.run("seed000-full", [py, "-m", "harness", "run", "cases-gpu", "--require-gpu",
                                       "--max-memory", "64GiB", "--out", str(alone)])
            if (alone / "run.json").is_file():
                full = read_run_json(alone / "run.json")["seed000_full"]
        check.doc["seed000_full"] = full
        check.write()


def _pytest_phase(check: Check, py: str, problems: list[str]) -> None:
    """The harness's own tests with --require-gpu, in the time left."""
    cores = usable_cores()
    tests = check.run("pytest", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 *(["-n", str(cores)] if cores > 1 else []), "--require-gpu",
                                 "tests"],
                      cap=check.left())
    check.doc["pytest"] = read_pytest(tests["output_tail"])
    if tests["rc"] != 0:
        problems.append(f"pytest exited {tests['rc']}" + (" (timed out)"
                                                         if tests["timed_out"] else ""))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.phase == "gpu":
        phase_gpu()
        return 0
    if args.phase == "timing":
        phase_timing(args.batch, args.seq_len, args.device)
        return 0

    check = Check(Path(args.out), args.budget)
    py, me = sys.executable, str(Path(__file__).resolve())
    probe = check.run("gpu", [py, me, "--phase", "gpu"])
    gpu = _json_lines(probe["output_tail"])
    check.doc["gpu"] = gpu
    message = _no_gpu(gpu)
    if message is not None:
        check.doc["verdict"] = message
        check.write()
        print(message, file=sys.stderr)
        return NO_GPU_EXIT

    problems: list[str] = []
    adapters = check.run("adapters", [py, "-m", "harness", "adapters"])
    if adapters["rc"] != 0:
        problems.append(f"adapters exited {adapters['rc']}")
    _suite_phases(check, py, problems)
    timing = check.run("timing", [py, me, "--phase", "timing", "--batch", str(args.batch),
                                  "--seq-len", str(args.seq_len)])
    check.doc["timing"] = _json_lines(timing["output_tail"])
    if timing["rc"] != 0:
        problems.append(f"timing exited {timing['rc']}")
    _pytest_phase(check, py, problems)
    check.doc["verdict"] = "passed" if not problems else "FAILED: " + "; ".join(problems)
    check.write()
    print("\n" + summary(check.doc), end="")
    print(f"figures in {check.out / 'gpu_check.json'}")
    return 0 if not problems else 1

if __name__ == "__main__":
    sys.exit(main())
