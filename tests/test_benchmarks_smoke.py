"""The benchmark scripts run (``--smoke``: tiny shapes, one repeat) and print their tables.

Not a timing test: the figures are whatever this machine gives; see ``benchmarks/``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each script in a fresh process

ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    "bench_reference.py": "ratio ref/torch",
    "bench_plots.py": "ms/plot",
    "bench_memory.py": "peak RSS MiB",
    "bench_suite.py": "peak RSS MiB",
    "bench_large_case.py": "ratio harness / torch",
    "gpu_reference_routes.py": "fused graphs replayed",  # on CPU: the fused kernels' twin
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_runs(script: str) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert SCRIPTS[script] in p.stdout, p.stdout[-2000:]
    assert "cpu " in p.stdout and "command " in p.stdout  # the machine facts
