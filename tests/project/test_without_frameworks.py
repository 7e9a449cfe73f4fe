"""The suite can be run as on a machine without TensorFlow (tests/support/without/sitecustomize.py):
here, that the hiding works in a process and its children, and that the harness then reports
the TensorFlow adapters unavailable instead of failing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# in front of the PYTHONPATH the tests run with (it may hold dependencies installed there)
HIDE = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "support" / "without"), str(ROOT)]
                                      + [p for p in [os.environ.get("PYTHONPATH")] if p]),
        "RNN_HARNESS_HIDE": "tensorflow,tf_keras,keras"}


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **HIDE},
                          capture_output=True, text=True, timeout=120)


def test_hidden_packages_cannot_be_imported_here_or_in_a_child():
    p = run("import subprocess, sys\n"
            "for name in ('tensorflow', 'tf_keras', 'keras.layers'):\n"
            "    try:\n"
            "        __import__(name)\n"
            "    except ModuleNotFoundError as e:\n"
            "        print('hidden', e.name)\n"
            "subprocess.run([sys.executable, '-c', 'import tensorflow'])\n")
    # keras.layers: refused at its package, keras
    assert p.stdout.split() == ["hidden", "tensorflow", "hidden", "tf_keras", "hidden",
                                "keras"], p.stderr
    assert "hidden by RNN_HARNESS_HIDE" in p.stderr  # the child's import failed too


def test_without_tensorflow_its_adapters_are_unavailable_not_errors():
    p = run("from harness import adapters\n"
            "for a in adapters.ADAPTERS.values():\n"
            "    if a.framework in ('tensorflow', 'keras'):\n"
            "        print(a.name, '|', a.unavailable_reason())\n")
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines, p.stderr
    assert all("hidden by RNN_HARNESS_HIDE" in ln or "not installed" in ln for ln in lines), lines
