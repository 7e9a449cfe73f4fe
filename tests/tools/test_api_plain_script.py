"""The API from a plain script: a file without ``if __name__ == "__main__":`` that calls
``harness.check`` with an adapter that runs in a worker process of its own. The worker starts
from the harness's entry point (harness/workers.py), so the script runs once, not once more in
each worker (where starting a worker failed: "An attempt has been made to start a new process
before the current process has finished its bootstrapping phase")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "the script's top level runs"

# {adapters}: the adapters checked; {setup}: lines run before the check
SCRIPT = """import harness
print({marker!r}, flush=True)
{setup}
result = harness.check({{"cell": "gru", "input_size": 2, "hidden_size": 3, "batch": 2,
                        "seq_len": 3, "seed": 1}}, adapters={adapters!r})
for pair in result.pairs:
    print("pair", pair.adapter, pair.verdict, "|", pair.reason, flush=True)
print("passed" if result else "failed", flush=True)
"""


def _run_script(tmp_path: Path, adapters: list[str], setup: str = "") -> tuple[str, list[str]]:
    """The script written to tmp_path and run as ``python script.py`` from tmp_path: (its
    stdout, its pair lines)."""
    script = tmp_path / "plain_script.py"
    script.write_text(SCRIPT.format(marker=MARKER, adapters=adapters, setup=setup))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout, [x for x in proc.stdout.splitlines() if x.startswith("pair ")]


def test_a_plain_script_runs_its_check_once_with_a_worker_process(tmp_path: Path):
    """An own-process adapter (the reference, in a worker started with an environment of its
    own: tests/support/own_process_adapters.py), registered by the script, as keras3-jax is."""
    setup = ("from harness.adapters import ADAPTERS\n"
             "from support.own_process_adapters import OwnProcess\n"
             "ADAPTERS[OwnProcess.name] = OwnProcess()")
    out, pairs = _run_script(tmp_path, ["reference", "own-process-test"], setup)
    assert out.count(MARKER) == 1, out
    assert len(pairs) == 2, out
    assert pairs[1].startswith("pair own-process-test pass |"), out
    assert out.splitlines()[-1] == "passed"


@pytest.mark.jax
@pytest.mark.nightly
def test_a_plain_script_checks_keras3_on_jax_once(tmp_path: Path):
    """Issue 54.2 as the user met it: keras3-jax (Keras 3 on JAX, in a worker started with
    KERAS_BACKEND=jax) from a script without a main guard was an error in a first pass and
    "unavailable: Keras 3 is loaded with the 'tensorflow' backend" in a second."""
    pytest.importorskip("jax")
    pytest.importorskip("keras")
    out, pairs = _run_script(tmp_path, ["reference", "keras3-jax"])
    assert out.count(MARKER) == 1, out
    assert len(pairs) == 2, out
    assert pairs[1].startswith("pair keras3-jax pass |"), out
