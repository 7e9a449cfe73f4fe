"""The same suite run twice on CPU gives identical results: the same divergence.csv, byte for
byte, and bit-identical outputs of every adapter. Runs in fresh processes (different hash
seeds), one of them with ``--isolate``, side by side to keep the file fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.adapters import get_adapter

# three whole runs of every CPU adapter in fresh processes (a minute of two cores): the nightly
# runs it (RNN_HARNESS_TEST_NIGHTLY=1), as its night-to-night diff of every report does
pytestmark = [pytest.mark.slow, pytest.mark.nightly]

ROOT = Path(__file__).parents[2]
CASES = ["cases/varlen-bidirectional.yaml"]  # lengths, both cells, two directions
NON_TF = "reference,noise-floor,torch-cpu,onnxruntime"  # isolated: no five TensorFlow imports


def _start(out: Path, hash_seed: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", *CASES, "--device", "cpu", "--quiet",
         "--save-outputs", "--out", str(out), *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _outputs(folder: Path) -> dict[str, dict[str, np.ndarray]]:
    found = {}
    for f in sorted(folder.glob("outputs/*/*.npz")):
        with np.load(f, allow_pickle=False) as z:
            found[f"{f.parent.name}/{f.stem}"] = {k: z[k] for k in z.files}
    return found


def test_two_runs_on_cpu_are_identical(tmp_path):
    runs = {"first": _start(tmp_path / "first", "1"),
            "second": _start(tmp_path / "second", "2"),
            "isolated": _start(tmp_path / "isolated", "3", "--isolate", "--adapters", NON_TF)}
    for name, proc in runs.items():
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} run failed:\n{err}"
    first, second = tmp_path / "first", tmp_path / "second"
    csv = (first / "divergence.csv").read_bytes()
    assert csv == (second / "divergence.csv").read_bytes()
    table = pd.read_csv(first / "divergence.csv")
    here = {n for n in NON_TF.split(",") if get_adapter(n).unavailable_reason() is None}
    assert len(table) > 100 and here - {"reference"} <= set(table["adapter"])

    out1, out2 = _outputs(first), _outputs(second)
    assert out1.keys() == out2.keys()
    assert "torch-cpu" not in here or any(k.endswith("/torch-cpu") for k in out1)
    for pair, arrays in out1.items():
        for name, a in arrays.items():
            np.testing.assert_array_equal(a, out2[pair][name], err_msg=f"{pair} {name}")

    # worker processes change nothing either: the same rows and bits for the adapters they ran
    isolated = pd.read_csv(tmp_path / "isolated" / "divergence.csv")
    same = table[table["adapter"].isin(NON_TF.split(","))].reset_index(drop=True)
    pd.testing.assert_frame_equal(isolated, same)
    for pair, arrays in _outputs(tmp_path / "isolated").items():
        for name, a in arrays.items():
            np.testing.assert_array_equal(a, out1[pair][name], err_msg=f"isolated {pair} {name}")
