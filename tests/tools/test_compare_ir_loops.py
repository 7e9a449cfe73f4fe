"""``rnn-harness compare`` on an OpenVINO IR whose LSTM is a TensorIterator stepping one
LSTMCell over time (issue 58): read as one layer, forward (stride 1) and reverse (stride -1),
judged against an ONNX LSTM with the same weights; one gate block edited in the cell's W
differs naming it; a Loop stays named as not read. The fixtures are built here with
onnx.helper and OpenVINO's opset, saved with ``openvino.save_model`` (well under a second)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main

I, H, B, T = 3, 4, 2, 5
FICO = [2, 0, 3, 1]  # OpenVINO's gate blocks (f, i, c, o) in ONNX's order (i, o, f, c)


def _cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _onnx(W: np.ndarray, R: np.ndarray, b: np.ndarray, direction: str, path: Path) -> None:
    pytest.importorskip("onnx")
    from support.onnx_graphs import lstm_model

    lstm_model(path, W, R, b, (T, B, I), direction)


def _fico(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a[k * H:(k + 1) * H] for k in FICO]).astype(np.float32)


def _ti(W: np.ndarray, R: np.ndarray, b: np.ndarray, stride: int, path: Path,
        loop: bool = False) -> None:
    """The ONNX weights (one direction) as a TensorIterator over X [B, T, I]'s axis 1 with
    ``stride``, its body one LSTMCell between a Squeeze and an Unsqueeze; saved as ``path``.
    ``loop``: the same body in an opset5 Loop instead (with its condition)."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino.op import loop as make_loop
    from openvino.op import tensor_iterator

    x = ops.parameter([B, T, I], np.float32, name="X")
    h0 = ops.constant(np.zeros((B, H), np.float32))
    c0 = ops.constant(np.zeros((B, H), np.float32))
    xb = ops.parameter([B, 1, I], np.float32)
    hb, cb = ops.parameter([B, H], np.float32), ops.parameter([B, H], np.float32)
    cell = ops.lstm_cell(ops.squeeze(xb, np.array([1])), hb, cb, _fico(W[0]), _fico(R[0]),
                         _fico(b[0, :4 * H] + b[0, 4 * H:]), H, name="cell")
    h_res, c_res = ops.result(cell.output(0)), ops.result(cell.output(1))
    y_res = ops.result(ops.unsqueeze(cell.output(0), np.array([1])))
    results, params = [h_res, c_res, y_res], [xb, hb, cb]
    if loop:
        results.append(ops.result(ops.constant(np.array(True))))
        ti = make_loop(ops.constant(np.array(T, np.int64)), ops.constant(np.array(True)))
        ti.set_special_body_ports([-1, 3])
    else:
        ti = tensor_iterator()
    ti.set_function(ov.Model(results, params, "body"))
    start, end = (0, -1) if stride == 1 else (-1, 0)
    ti.set_sliced_input(xb, x.output(0), start, stride, 1, end, 1)
    ti.set_merged_input(hb, h0.output(0), h_res.output(0))
    ti.set_merged_input(cb, c0.output(0), c_res.output(0))
    y = ti.get_concatenated_slices(y_res.output(0), start, stride, 1, end, 1)
    h_n, c_n = ti.get_iter_value(h_res.output(0), -1), ti.get_iter_value(c_res.output(0), -1)
    ti.set_friendly_name("ti")
    model = ov.Model([ops.result(o) for o in (y, h_n, c_n)], [x], "m")
    ov.save_model(model, str(path), compress_to_fp16=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """``fwd.onnx``/``fwd.xml`` and ``rev.onnx``/``rev.xml``: an ONNX LSTM and its weights in
    a TensorIterator stepping forward and backward; ``bad.xml``, the forward one with W's f
    block (ONNX's third) 0.5 larger; ``loop.xml``, the forward body in a Loop."""
    pytest.importorskip("openvino")
    sys.modules.setdefault("openvino_telemetry", None)  # as the adapters do: no usage event
    folder = tmp_path_factory.mktemp("ir-loops")
    rng = np.random.default_rng(0)
    W, R = rng.uniform(-.5, .5, (1, 4 * H, I)), rng.uniform(-.5, .5, (1, 4 * H, H))
    b = rng.uniform(-.5, .5, (1, 8 * H))
    edited = W.copy()
    edited[0, 2 * H:3 * H] += 0.5
    for name, direction, stride in (("fwd", "forward", 1), ("rev", "reverse", -1)):
        _onnx(W, R, b, direction, folder / f"{name}.onnx")
        _ti(W, R, b, stride, folder / f"{name}.xml")
    _ti(edited, R, b, 1, folder / "bad.xml")
    _ti(W, R, b, 1, folder / "loop.xml", loop=True)
    return folder


@pytest.mark.parametrize("name", ["fwd", "rev"])
def test_a_tensor_iterator_over_one_lstm_cell_is_the_same_as_the_onnx_lstm(
        files, capsys, name) -> None:
    code, out, err = _cli(capsys, files / f"{name}.onnx", files / f"{name}.xml")
    assert code == 0, out + err
    assert ("shipped 'ti' = original's 'main/lstm': TensorIterator 'ti' (one LSTM cell "
            "stepped over time) of the OpenVINO IR") in out, out
    direction = "forward" if name == "fwd" else "reverse"
    assert f"LSTM I=3 H=4 {direction}" in out, out
    assert out.count("pass (openvino, INFERENCE_PRECISION_HINT") == 2, out


def test_one_gate_block_edited_in_the_cells_w_differs_naming_it(files, capsys) -> None:
    code, out, err = _cli(capsys, files / "fwd.onnx", files / "bad.xml", "--budget", "0.5")
    assert code == 1, out + err
    assert "weights: 1 of 16 blocks differ (forward/W_f; max abs 0.5)" in out, out


def test_a_loop_around_the_cell_stays_named_as_not_read(files, capsys) -> None:
    code, out, err = _cli(capsys, files / "fwd.onnx", files / "loop.xml")
    assert code == 2 and out == "" and err.count("\n") == 1, out + err
    assert "recurrent cells inside a loop are not read: Loop 'ti' (body: " in err, err
    assert "LSTMCell" in err, err


def test_the_reproducer_of_the_edited_loop_reads_the_cells_w_and_exits_1(
        files, tmp_path) -> None:
    import subprocess

    import harness
    from harness.models.repro import write_repros

    result = harness.compare_models(files / "fwd.onnx", files / "bad.xml", budget_s=0.5)
    assert write_repros(result, tmp_path / "r") == [f"reproducer: {tmp_path}/r/repro-0/repro.py"]
    folder = tmp_path / "r" / "repro-0"
    # outside the checkout, without it on the path: the script imports NumPy and OpenVINO only
    run = subprocess.run([sys.executable, str(folder / "repro.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1"})
    assert run.returncode == 1, run.stdout + run.stderr
    weights = [line for line in run.stdout.splitlines() if line.startswith("weights ")]
    assert len(weights) == 16
    assert [line.split()[1] for line in weights if "DIFFERS" in line] == ["forward/W_f"]
    assert "W[0, 0:4]" in weights[2]  # OpenVINO's gate order f, i, c, o: f first
    assert "the shipped layer differs: weights differ in forward/W_f; " in run.stdout


def test_the_loop_is_read_as_one_layer_without_lengths(files) -> None:
    from harness.models.openvino_ir import ir_adapters, ir_layers
    from harness.spec import Case

    [fwd] = ir_layers(files / "fwd.xml", "fwd.xml", 10**9)
    [rev] = ir_layers(files / "rev.xml", "rev.xml", 10**9)
    assert (fwd.fields["direction"], rev.fields["direction"]) == ("forward", "reverse")
    assert (fwd.fields["batch"], fwd.fields["seq_len"], fwd.fields["input_size"]) == (B, T, I)
    assert fwd.ref.op_type == "TensorIterator" and fwd.ref.loop["x_axis"] == 1
    assert {k: v.shape for k, v in fwd.native.items()} == {
        "W": (1, 4 * H, I), "R": (1, 4 * H, H), "B": (1, 8 * H)}
    adapter = ir_adapters(fwd.ref)[1]
    assert adapter.not_applicable_reason(Case(name="c", **fwd.fields)) is None
    assert adapter.not_applicable_reason(Case(name="c", **fwd.fields, seq_lengths=[5, 3])) == (
        "a TensorIterator steps over every step of X: it has no lengths")


def test_a_reverse_layer_against_a_forward_original_is_one_line_naming_the_direction(
        files, capsys) -> None:
    """A forward original has no weights of the reverse direction to compare with: exit 2 and
    one line naming both layers' directions, not a traceback."""
    code, out, err = _cli(capsys, files / "fwd.onnx", files / "rev.onnx")
    assert (code, out) == (2, "")
    assert "(LSTM I=3 H=4 reverse) has no layer of the same cell, sizes and direction" in err
    assert "LSTM I=3 H=4 forward" in err and err.count("\n") == 1, err
