"""The reproducer of a differing OpenVINO IR compare pairing (issue 58, docs/compare.md):
``compare --out`` writes ``model.xml``/``model.bin`` (the sequence op cut out as a one-op IR),
``data.npz`` and ``repro.py``, which judges the IR's weight constants and its outputs at the
runtime's default precision and at f32 in OpenVINO, and exits 1 where the pairing differs, 0
where it does not. The fixtures: an ONNX LSTM built with onnx.helper, converted by
``openvino.convert_model`` (about 0.1 s), one with a gate block of W edited."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.models.repro import write_repro, write_repros

I, H, B, T = 3, 4, 2, 5


def _lstm_onnx(W: np.ndarray, R: np.ndarray, b: np.ndarray, path: Path) -> Path:
    pytest.importorskip("onnx")
    from support.onnx_graphs import lstm_model

    return lstm_model(path, W, R, b, (T, B, I))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """``a.onnx`` and its IR ``a.xml``; ``b.xml``, the IR of the same LSTM with W's f block
    (ONNX's third, i o f c) 0.5 larger."""
    pytest.importorskip("openvino")
    sys.modules.setdefault("openvino_telemetry", None)  # as the adapters do: no usage event
    import openvino as ov

    folder = tmp_path_factory.mktemp("ir-repro")
    rng = np.random.default_rng(0)
    W, R = rng.uniform(-.5, .5, (1, 4 * H, I)), rng.uniform(-.5, .5, (1, 4 * H, H))
    b = rng.uniform(-.5, .5, (1, 8 * H))
    edited = W.copy()
    edited[0, 2 * H:3 * H] += 0.5
    for name, w in (("a", W), ("b", edited)):
        model = ov.convert_model(str(_lstm_onnx(w, R, b, folder / f"{name}.onnx")))
        ov.save_model(model, str(folder / f"{name}.xml"), compress_to_fp16=False)
    return folder


def _run_script(folder: Path) -> subprocess.CompletedProcess:
    # outside the checkout, without it on the path: the script imports NumPy and OpenVINO only
    return subprocess.run([sys.executable, str(folder / "repro.py")], cwd=folder.parent,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})


def _first_t(text: str) -> str:
    return re.search(r"t=(\d+)", text).group(1)


def test_an_ir_with_an_edited_weight_gets_a_one_op_ir_and_a_script_exiting_1_naming_it(
        files, tmp_path) -> None:
    from harness.readers.openvino_ir import parse_xml

    result = harness.compare_models(files / "a.onnx", files / "b.xml", budget_s=0.5)
    assert write_repros(result, tmp_path / "r") == [f"reproducer: {tmp_path}/r/repro-0/repro.py"]
    folder = tmp_path / "r" / "repro-0"
    assert sorted(f.name for f in folder.iterdir()) == ["data.npz", "model.bin", "model.xml",
                                                        "repro.py"]
    ops = [op.type for op in parse_xml(folder / "model.xml", None).ops.values()]
    assert sorted(set(ops)) == ["Const", "LSTMSequence", "Parameter", "Result"]
    assert ops.count("LSTMSequence") == 1
    with np.load(folder / "data.npz") as data:
        assert {"default/feed/ir_X", "f32/expected_y", "f32/floor_c_n", "original/forward/W_f",
                "where/forward/bR_f"} <= set(data.files)
    run = _run_script(folder)
    assert run.returncode == 1, run.stdout + run.stderr
    weights = [line for line in run.stdout.splitlines() if line.startswith("weights ")]
    assert len(weights) == 16
    assert [line.split()[1] for line in weights if "DIFFERS" in line] == ["forward/W_f"]
    assert "W[0, 0:4]" in weights[2]  # OpenVINO's gate order f, i, c, o: f first
    assert "the shipped layer differs: weights differ in forward/W_f; " in run.stdout
    # each run printed with its precision, and first differing where its verdict did
    [p] = result.pairings
    verdicts = dict(zip(("default", "f32"), p.all_outputs, strict=True))
    precision = p.outputs.figures.adapter.rsplit(" ", 1)[1]
    assert f"\ndefault: INFERENCE_PRECISION_HINT {precision} here;" in run.stdout
    assert "\nf32: INFERENCE_PRECISION_HINT f32 here; judged as float32" in run.stdout
    for run_name, v in verdicts.items():
        said = re.search(rf"{run_name} \(\w+\) outputs first at (y direction 0 t=\d+)",
                         run.stdout)
        assert said is not None and _first_t(said.group(1)) == _first_t(v.figures.first), (
            run.stdout, v.reason)


def test_the_script_of_the_clean_ir_exits_0(files, tmp_path) -> None:
    [p] = harness.compare_models(files / "a.onnx", files / "a.xml").pairings
    assert p.same
    assert write_repro(p, tmp_path / "clean", tmp_path) == f"reproducer: {tmp_path}/clean/repro.py"
    run = _run_script(tmp_path / "clean")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "DIFFERS" not in run.stdout
    assert run.stdout.rstrip().endswith("the shipped layer agrees with the original")
