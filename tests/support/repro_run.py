"""Run a written reproducer the way a maintainer would: a fresh Python process in which
rnn-harness cannot be imported (tests/support/without/sitecustomize.py hides it, as if not
installed), started in the reproducer's folder, with no path to the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WITHOUT = Path(__file__).parent / "without"


def harness_free_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(WITHOUT)  # only the hiding sitecustomize
    env["RNN_HARNESS_HIDE"] = "harness"
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def run_repro(folder: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python repro.py`` in ``folder``; asserts first that this setting hides rnn-harness."""
    env = harness_free_env()
    probe = subprocess.run([sys.executable, "-c", "import harness"], cwd=folder, env=env,
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "hidden by RNN_HARNESS_HIDE" in probe.stderr, probe.stderr
    return subprocess.run([sys.executable, "repro.py"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=timeout)


def first_line(row) -> str:
    """What a reproducer prints for the report's first diverging row (a pandas Series)."""
    known = row["t"] is not None and row["t"] == row["t"] and int(row["t"]) >= 0  # not NaN
    t = f" t={int(row['t'])}" if known else ""
    return (f"first diverging: {row['output']} layer {int(row['layer'])} "
            f"direction {int(row['direction'])}{t}")
