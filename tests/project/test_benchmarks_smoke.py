"""The benchmark scripts run (``--smoke``: tiny shapes, one repeat) and print their tables.

Not a timing test: the figures are whatever this machine gives; see ``benchmarks/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each script in a fresh process

ROOT = Path(__file__).resolve().parents[2]

SCRIPTS = {
    "bench_reference.py": "ratio ref/torch",
    "bench_plots.py": "ms/plot",
    "bench_memory.py": "peak RSS MiB",
    "bench_suite.py": "peak RSS MiB",
    "bench_large_case.py": "ratio harness / torch",
    "gpu_reference_routes.py": "fused graphs replayed",  # on CPU: the fused kernels' twin
    "quantizer_coverage.py": "what feeds the recurrent op",
    "litert_int8_exactness.py": "bit-exact:",
}


@pytest.mark.nightly
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_runs(script: str) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert SCRIPTS[script] in p.stdout, p.stdout[-2000:]
    assert "cpu " in p.stdout and "command " in p.stdout  # the machine facts


def test_gpu_check_says_there_is_no_gpu_and_exits_non_zero(tmp_path: Path) -> None:
    # CUDA_VISIBLE_DEVICES="" hides any GPU: the same answer on a GPU runner
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"),
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "no GPU" in p.stderr
    assert "no GPU" in json.loads((tmp_path / "gpu_check.json").read_text())["verdict"]


@pytest.mark.nightly  # a benchmark script's smoke run, as the others
def test_gpu_check_timing_code_runs_on_cpu() -> None:
    """The cuDNN-vs-reference timing, dry run on torch's CPU nn.LSTM and the NumPy reference
    (tiny B and T): the GPU run of the same code must not fail on a typo."""
    pytest.importorskip("torch", reason="the timing phase runs torch's nn.LSTM")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--phase",
                        "timing", "--device", "cpu", "--batch", "2", "--seq-len", "3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    figures = {}
    for line in p.stdout.splitlines():
        figures.update(json.loads(line))
    assert figures["max_abs_y_reference_vs_cudnn"] < 1e-12
    assert {"cudnn_forward_s", "cudnn_forward_backward_s", "reference_forward_s",
            "reference_forward_backward_s"} <= figures.keys()
