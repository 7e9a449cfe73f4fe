"""What the harness's own test run leaves out, and how (tests/conftest.py): the tests marked
``roads``, ``nightly`` and, where no GPU is visible, ``gpu`` are deselected with a count line,
not skipped; ``--require-gpu`` keeps the ``gpu`` tests and fails one that skips, so that a GPU
runner cannot pass them by skipping (benchmarks/gpu_check.py's pytest phase)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_TEST = "tests/reference/test_fast_cuda.py::test_cuda_kernels_match_the_reference"


def _pytest(*args: str) -> subprocess.CompletedProcess:
    # no GPU visible, also on a GPU runner: CuPy reaches none
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    for name in ("PYTEST_ADDOPTS", "RNN_HARNESS_TEST_ROADS", "RNN_HARNESS_TEST_NIGHTLY"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_without_a_gpu_require_gpu_fails_the_gpu_tests_rather_than_skip_them() -> None:
    out = _pytest(f"{GPU_TEST}[lstm-eager]", f"{GPU_TEST}[lstm-graphs]", "--require-gpu")
    last = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 1, out.stdout[-2000:]
    assert last.startswith("2 failed") and "skipped" not in last, last
    assert "--require-gpu: a GPU test may not skip" in out.stdout
