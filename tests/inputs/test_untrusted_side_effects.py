"""What the commands leave behind (issue 31): a full standard output is not bad input, and
nothing is written outside the paths given (HOME, the cache folder and TMPDIR stay empty)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.bad_input import GOOD

from harness.cli import main

ROOT = Path(__file__).parents[2]


# 16. Standard output ----------------------------------------------------------------------------

def test_a_passing_run_into_a_full_standard_output_is_not_bad_input(tmp_path, capsys,
                                                                    monkeypatch):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    with open("/dev/full", "w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        # a tolerance of the run's own: the noise floor's pair is judged by it, not by its own
        # floor (then it would pass by construction: a vacuous run, exit 1)
        code = main(["run", str(case), "--out", str(tmp_path / "r"), "--quiet", "--adapters",
                     "reference,noise-floor", "--atol", "1e-3"])
        monkeypatch.undo()
        with contextlib.suppress(OSError):  # what it could not write is dropped at close
            full.close()
    err = capsys.readouterr().err.splitlines()
    assert code == 74 and len(err) == 1 and "cannot write to standard output" in err[0], err
    assert (tmp_path / "r" / "run.json").is_file()


def test_a_full_standard_output_is_not_bad_input(tmp_path):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "harness", "init", str(tmp_path / "d")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              cwd=ROOT)
    assert proc.returncode == 74, proc.stderr
    assert proc.stderr.splitlines() == ["rnn-harness: error: cannot write to standard output: "
                                        "No space left on device (files the command wrote are "
                                        "complete)"]
    assert (tmp_path / "d" / "float64.yaml").is_file()


# 17. Nothing written outside the paths given --------------------------------------------------

_SIDE_EFFECTS = """
import sys
import numpy as np
from harness.cli import main
w, out = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)
np.savez(f"{w}/w.npz", weight_ih_l0=rng.normal(size=(12, 2)), weight_hh_l0=rng.normal(size=(12, 3)),
         bias_ih_l0=np.zeros(12), bias_hh_l0=np.zeros(12))
codes = [
    main(["run", f"{w}/c.yaml", "--out", f"{out}/r", "--quiet", "--plots", "all",
          "--adapters", "reference,torch-cpu,onnxruntime,keras3,openvino,"
          "onnx-reference,flax-linen,keras3-jax,torch-onnx-torchscript,litert-keras3"]),
    main(["run", f"{w}/c.yaml", "--out", f"{out}/s1", "--quiet", "--shard", "1/2",
          "--adapters", "reference,noise-floor", "--isolate"]),
    main(["run", f"{w}/c.yaml", "--out", f"{out}/s2", "--quiet", "--shard", "2/2",
          "--adapters", "reference,noise-floor"]),
    main(["merge", f"{out}/m", f"{out}/s1", f"{out}/s2"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz", f"{out}/w.onnx"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz",
          f"{out}/w.weights.h5"]),
    main(["convert", "--case", f"{w}/c.yaml", "--from", "torch", f"{w}/w.npz",
          f"{out}/w.msgpack"]),
    main(["convert", "--from", "flax", "--to", "torch", f"{out}/w.msgpack", f"{out}/back.npz"]),
    main(["doctor", "--case", f"{w}/c.yaml", "--weights", f"{w}/w.npz", "--layout", "torch",
          "--adapter", "torch-cpu", "--budget", "5"]),
    main(["init", f"{out}/init"]),
]
print("CODES", codes)
"""


def _in_fresh_home(tmp_path: Path, script: str, timeout: float) -> tuple[str, Path]:
    """Run ``script`` (argv: the case folder w, the output folder) in a subprocess whose HOME,
    XDG_CACHE_HOME and TMPDIR are fresh empty folders; assert they stay empty and w holds only
    what the script wrote there first. Returns (stdout, w)."""
    env = dict(os.environ)
    fresh = {k: tmp_path / k.lower() for k in ("HOME", "XDG_CACHE_HOME", "TMPDIR")}
    for k, p in fresh.items():
        p.mkdir()
        env[k] = str(p)
    for k in ("XDG_CONFIG_HOME", "KERAS_HOME", "MPLCONFIGDIR", "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(k, None)
    w, out = tmp_path / "w", tmp_path / "out"
    w.mkdir()
    out.mkdir()
    (w / "c.yaml").write_text(GOOD)
    proc = subprocess.run([sys.executable, "-c", script, str(w), str(out)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    for k, p in fresh.items():
        left = sorted(str(q.relative_to(p)) for q in p.rglob("*"))
        assert left == [], f"{k}: the commands left {left}"
    return proc.stdout + proc.stderr, w


def test_commands_leave_home_cache_and_tmpdir_unchanged(tmp_path):
    pytest.importorskip("keras")
    pytest.importorskip("onnxruntime")
    said, w = _in_fresh_home(tmp_path, _SIDE_EFFECTS, 300)
    # the merge (3rd) of the references alone tests no framework: vacuous, exit 1
    assert "CODES [0, 0, 0, 1, 0, 0, 0, 0," in said, said
    assert sorted(q.name for q in w.iterdir()) == ["c.yaml", "w.npz"]


# The roads with caches and workers of their own: Inductor's caches and allow_rnn
# (torch-compile, a compile of tens of seconds), Keras 3 workers on torch and OpenVINO, MLX,
# litert-torch (torch.export, TensorFlow's MLIR converter and the LiteRT interpreter: no
# export_dir, no cache), ExecuTorch's lowering and runtime (its program saved with
# --save-outputs, inside the run's folder). Named, so the named-only ones run too.
_ROADS = """
import sys
from harness.cli import main
w, out = sys.argv[1], sys.argv[2]
print("CODE", main(["run", f"{w}/c.yaml", "--out", f"{out}/r", "--quiet", "--save-outputs",
                    "--adapters", "reference,torch-compile,keras3-torch,keras3-openvino,mlx,"
                    "litert-torch,executorch,executorch-portable"]))
"""


@pytest.mark.roads  # a compile: the nightly's
def test_the_compiling_roads_leave_home_cache_and_tmpdir_unchanged(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("keras")
    said, w = _in_fresh_home(tmp_path, _ROADS, 900)
    assert "CODE 0" in said, said
    assert sorted(q.name for q in w.iterdir()) == ["c.yaml"]
    pairs = json.loads((tmp_path / "out" / "r" / "run.json").read_text())["pairs"]
    assert {p["adapter"]: p["status"] for p in pairs} == {
        "reference": "baseline", "torch-compile": "pass", "keras3-torch": "pass",
        "keras3-openvino": "pass", "mlx": "pass", "litert-torch": "pass", "executorch": "pass",
        "executorch-portable": "pass"}, pairs
