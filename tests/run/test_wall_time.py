"""The final line's "s in all" is the run's wall time as the user waits for it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_in_all_is_the_wall_time_the_user_waits(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(ROOT / "cases" / "initial-state.yaml"),
         "--adapters", "torch-cpu", "--quiet", "--out", str(tmp_path / "rep")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    last = ""
    for line in proc.stdout:  # the final line is printed after the report is written
        last = line
        printed = time.monotonic() - started
    proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read()
    seconds = float(re.search(r"([0-9.]+) s in all\)", last).group(1))
    # the interpreter's start before `import harness` is the only part the figure leaves out
    assert abs(seconds - printed) <= 0.05 * printed, (seconds, printed, last)
