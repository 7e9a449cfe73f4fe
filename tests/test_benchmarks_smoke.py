"""The benchmark scripts run (``--smoke``: tiny shapes, one repeat) and print their tables.

Not a timing test: the figures are whatever this machine gives; see ``benchmarks/``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPTS = {
    "bench_reference.py": "ratio ref/torch",
    "bench_overhead.py": "overhead %",
    "bench_plots.py": "ms/plot",
    "bench_memory.py": "peak RSS MiB",
    "bench_suite.py": "peak RSS MiB",
}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_benchmark_runs(script: str) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--smoke"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert SCRIPTS[script] in p.stdout, p.stdout[-2000:]
    assert "cpu " in p.stdout and "command " in p.stdout  # the machine facts


def test_layout_timings_run() -> None:
    """``bench_overhead.py --layouts``: every layout describes the suite's cases it can hold."""
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_overhead.py"),
                        "--layouts", "cases", "--repeat", "1"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "describe ms" in p.stdout, p.stdout[-2000:]
    lines = {line.split()[0]: line.split() for line in p.stdout.splitlines() if line.strip()}
    assert int(lines["torch"][1]) > 20 and int(lines["tf-block"][1]) > 5, p.stdout[-2000:]


def test_suite_totals_run(tmp_path: Path) -> None:
    """``bench_overhead.py --suite``: a row per adapter, every pair together, and the cases'
    prepare beyond the reference and noise floor (alone and with the pairs)."""
    (tmp_path / "reverse.yaml").write_text((ROOT / "cases" / "reverse.yaml").read_text())
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_overhead.py"),
                        "--suite", str(tmp_path), "--repeat", "1",
                        "--adapters", "reference,noise-floor"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {line.split("  ")[0].strip(): line.split() for line in p.stdout.splitlines()
            if line.strip()}
    assert rows["noise-floor"][1] == "2", p.stdout[-2000:]  # pairs: the case's lstm and gru
    assert rows["prepare (per case)"][3] == "2", p.stdout[-2000:]  # cases
    for name in ("reference", "all", "all with prepare"):
        assert name in rows, p.stdout[-2000:]
