"""The reproducer of a differing ``.tflite`` compare pairing (issue 58, docs/compare.md):
``compare --out`` writes ``model.tflite`` (the LSTM op cut out as a one-op file), ``data.npz``
and ``repro.py``, which judges the file's weights and outputs in the LiteRT interpreter and
exits 1 where the pairing differs, 0 where it does not. The cheap tests use flatbuffers made
with LiteRT's schema (tests/tools/_tflite_make.py); the converter's int8 file is
tests/tools/test_compare_tflite.py's roads test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.models.repro import write_repro

sys.path.insert(0, str(Path(__file__).parent))
mk = pytest.importorskip("_tflite_make")
pytest.importorskip("ai_edge_litert.interpreter")

H, I = 4, 3


def _weights() -> dict[str, np.ndarray]:
    return mk.weights(0, H, I)


def _run_script(folder: Path) -> subprocess.CompletedProcess:
    # outside the checkout, without it on the path: the script imports NumPy and LiteRT only
    return subprocess.run([sys.executable, str(folder / "repro.py")], cwd=folder.parent,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})


def test_a_differing_tflite_op_inside_a_model_gets_a_one_op_file_its_data_and_a_script(
        tmp_path, capsys) -> None:
    schema = pytest.importorskip("ai_edge_litert.schema_py_generated")
    w = _weights()
    bad = dict(w, W_f=w["W_f"] + 0.5)
    (tmp_path / "a.tflite").write_bytes(mk.lstm(w))
    (tmp_path / "b.tflite").write_bytes(mk.lstm(bad, lead="TANH"))  # the op behind a TANH
    assert main(["compare", str(tmp_path / "a.tflite"), str(tmp_path / "b.tflite"),
                 "--out", str(tmp_path / "r")]) == 1
    assert "reproducer: " in capsys.readouterr().out
    folder = tmp_path / "r" / "repro-0"
    assert sorted(f.name for f in folder.iterdir()) == ["data.npz", "model.tflite", "repro.py"]
    cut = schema.ModelT.InitFromPackedBuf((folder / "model.tflite").read_bytes(), 0)
    assert [cut.operatorCodes[o.opcodeIndex].builtinCode for o in cut.subgraphs[0].operators] \
        == [schema.BuiltinOperator.UNIDIRECTIONAL_SEQUENCE_LSTM]
    with np.load(folder / "data.npz") as data:
        assert {"x", "expected_y", "original/forward/W_f"} <= set(data.files)
        np.testing.assert_array_equal(data["original/forward/W_f"], w["W_f"].astype(np.float32))
    run = _run_script(folder)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "DIFFERS" in line]
    assert len(lines) == 1 and "forward/W_f" in lines[0], run.stdout
    assert ("the shipped layer differs: weights differ in forward/W_f; first at y direction 0 "
            "t=1") in run.stdout


def test_the_script_of_a_scale_edited_int8_weight_exits_1_and_of_the_clean_file_0(
        tmp_path) -> None:
    w = _weights()
    scales = {k: float(np.abs(v).max()) / 127 for k, v in w.items() if k[0] in "WR"}
    files = {"clean": mk.lstm(w, scales=scales),
             "edited": mk.lstm(w, scales=scales, declared={"W_f": scales["W_f"] * 1.25})}
    for name, shipped in files.items():
        [p] = harness.compare_models(mk.lstm(w), shipped).pairings
        write_repro(p, tmp_path / name, tmp_path)
        run = _run_script(tmp_path / name)
        figures = p.outputs.figures
        assert (f"SQNR over y {figures.sqnr_db:.1f} dB; an ideal dynamic quantization "
                f"{figures.ideal_sqnr_db:.1f} dB") in run.stdout
        assert run.returncode == (0 if name == "clean" else 1), run.stdout + run.stderr
        assert p.same == (name == "clean")
    assert "scale 1.25x what its values need  DIFFERS" in run.stdout
    cost = figures.ideal_sqnr_db - figures.sqnr_db  # the edited file's, as the verdict has it
    assert cost > 6
    assert f"quantization costs {cost:.1f} dB more than an ideal quantization" in run.stdout
