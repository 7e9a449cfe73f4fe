"""``rnn-harness compare`` on ONNX files as exporters write them (issue 56): an ``nn.LSTMCell``
looped inside an ``If`` branch by torch's TorchScript exporter, found through its constant
chains and run as the file holds it (the node cut out) in ONNX Runtime and OpenVINO; one gate
block perturbed in the file; the same node in two branches; weights fed by a graph input;
``--inputs`` through the model up to the node; the reproducers; bad input as one line. Every
fixture is built here with torch and onnx.helper."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.cli import main
from harness.compare import PASS
from harness.layouts import get_layout
from harness.spec import Case

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

I, H = 3, 4
CELL_PATH = "main/If:then_branch/Loop:body/cell/LSTM"
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None


class Looped(torch.nn.Module):
    """An LSTMCell looped over time under a data-dependent ``if`` (scripted: an If whose
    then-branch holds a Loop whose body holds the LSTM node, its W, R, B Slices, Concats and
    Unsqueezes of the main graph's initializers)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(I, H)

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(x.shape[1], 4)
        c = torch.zeros(x.shape[1], 4)
        if bool(flag.sum() > 0):
            for t in range(x.shape[0]):
                h, c = self.cell(x[t], (h, c))
        return h


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The module, its state_dict as model.pt, its TorchScript export as model.onnx, and the
    export with the forget-gate block of the cell's weight_ih perturbed (bad.onnx)."""
    torch.manual_seed(0)
    module = Looped()
    folder = tmp_path_factory.mktemp("compare-onnx")
    torch.save(module.state_dict(), folder / "model.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), (torch.randn(5, 1, I), torch.ones(1)),
                          str(folder / "model.onnx"), dynamo=False, opset_version=17)
    model = onnx.load(str(folder / "model.onnx"))
    edited = 0
    for t in model.graph.initializer:
        if t.name == "cell.weight_ih":  # the source of the folded W: torch's gates i, f, g, o
            a = numpy_helper.to_array(t).copy()
            a[H:2 * H] += 0.5
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            edited += 1
    assert edited == 1
    onnx.save(model, str(folder / "bad.onnx"))
    return {"module": module, "pt": folder / "model.pt", "onnx": folder / "model.onnx",
            "bad": folder / "bad.onnx"}


def _cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _runtimes(pairing) -> dict[str, str]:
    return {o.figures.adapter: o.status for o in pairing.all_outputs}


def test_an_exported_lstmcell_in_an_if_branch_is_the_same(exported, capsys) -> None:
    code, out, err = _cli(capsys, exported["pt"], exported["onnx"])
    assert code == 0, out + err
    assert f"shipped '{CELL_PATH}' = original's 'cell'" in out
    assert "in the body of '/Loop' in the then-branch of '/If'" in out
    assert out.splitlines()[-1].startswith("same: every recurrent layer of ")
    # the module object as ORIGINAL; both runtimes ran the node cut out of the file
    result = harness.compare_models(exported["module"], exported["onnx"])
    assert result and len(result.pairings) == 1
    p = result.pairings[0]
    assert (p.shipped.path, p.original.path, p.weights.status) == (CELL_PATH, "cell", PASS)
    assert _runtimes(p) == {"onnxruntime": PASS, "openvino": PASS if HAS_OPENVINO
                            else "unavailable"}
    assert "cut out of the model" in p.outputs.reason


def test_one_gate_block_perturbed_in_the_file_differs_with_a_reproducer(
        exported, capsys, tmp_path: Path) -> None:
    code, out, err = _cli(capsys, exported["pt"], exported["bad"], "--out", tmp_path / "r",
                          "--budget", "0.5")
    assert code == 1, out + err
    assert "weights: 1 of 16 blocks differ (forward/W_f; max abs 0.5)" in out
    assert "outputs (onnxruntime): first diverges at y L0 d0 t=1" in out
    final = [line for line in out.splitlines() if line.startswith("differs: ")]
    assert final == [f"differs: 1 of 1 layer(s) of {exported['bad']}: '{CELL_PATH}': weights "
                     "differ in forward/W_f"]
    report = json.loads((tmp_path / "r" / "compare.json").read_text())
    assert [p["weights"]["tensors"] for p in report["pairings"]] == [["forward/W_f"]]
    assert (tmp_path / "r" / "compare.md").read_text().count("\n") > 5
    repro = tmp_path / "r" / "repro-0"
    assert sorted(f.name for f in repro.iterdir()) == ["data.npz", "model.onnx", "repro.py"]
    run = subprocess.run([sys.executable, "repro.py"], cwd=repro, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "the shipped layer differs: first at y direction 0 t=1" in run.stdout
    # the same folder again: the report's own files and folders are replaced
    assert _cli(capsys, exported["pt"], exported["bad"], "--out", tmp_path / "r",
                "--budget", "0.5")[0] == 1


# onnx.helper models on a torch nn.LSTM's weights -------------------------------------------

@pytest.fixture(scope="module")
def lstm():
    torch.manual_seed(1)
    module = torch.nn.LSTM(I, H)
    case = Case(name="c", cell="lstm", input_size=I, hidden_size=H)
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    canonical = get_layout("torch").from_native(state, case)
    native = get_layout("onnx").to_native(canonical, case)
    return module, {k: np.asarray(v, np.float32) for k, v in native.items()}


def _model(path: Path, nodes, inits, inputs=("X",)) -> Path:
    graph = helper.make_graph(
        list(nodes), "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                           for n in inputs],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def _inits(native: dict[str, np.ndarray]):
    return [numpy_helper.from_array(v, k) for k, v in native.items()]


def test_the_same_node_in_two_branches_is_one_pairing_naming_both(lstm, tmp_path: Path) -> None:
    module, native = lstm

    def branch(name: str) -> onnx.GraphProto:
        node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", ""], name=name,
                                hidden_size=H)
        return helper.make_graph([node], "b", [], [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])

    cond = helper.make_node("If", ["cond"], ["Y"], name="pick", then_branch=branch("a"),
                            else_branch=branch("b"))
    path = _model(tmp_path / "two.onnx", [cond], _inits(native), inputs=("X", "cond"))
    result = harness.compare_models(module, path)
    assert result and len(result.pairings) == 1
    p = result.pairings[0]
    assert [s.path for s in p.shipped_all] == ["main/pick:then_branch/a",
                                              "main/pick:else_branch/b"]
    assert p.title() == ("shipped 'main/pick:then_branch/a' = 'main/pick:else_branch/b' = "
                         "original's 'state_dict'")


def test_a_file_that_is_one_lstm_node_runs_as_itself(lstm, tmp_path: Path) -> None:
    module, native = lstm
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Yh"], name="rnn",
                            hidden_size=H)
    path = _model(tmp_path / "one.onnx", [node], _inits(native))
    result = harness.compare_models(module, path)
    assert result, [o.reason for p in result.pairings for o in p.all_outputs]
    (p,) = result.pairings
    assert p.outputs.status == PASS and "ran the shipped file itself" in p.outputs.reason
    # h_n is not an output of the file: it is left out, not compared
    assert "does not output it" in p.outputs.reason


def test_weights_fed_by_a_graph_input_are_named(lstm, capsys, tmp_path: Path) -> None:
    module, native = lstm
    node = helper.make_node("LSTM", ["X", "Wfed", "R", "B"], ["Y", ""], name="rnn",
                            hidden_size=H)
    inits = [i for i in _inits(native) if i.name != "W"]
    path = _model(tmp_path / "fed.onnx", [node], inits, inputs=("X", "Wfed"))
    torch.save(module.state_dict(), tmp_path / "orig.pt")
    code, out, err = _cli(capsys, tmp_path / "orig.pt", path)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"rnn-harness: error: {path}")
    assert "graph input" in err and "'Wfed'" in err


def test_inputs_run_through_the_model_up_to_the_node(lstm, capsys, tmp_path: Path) -> None:
    module, native = lstm
    nodes = [helper.make_node("Tanh", ["X"], ["Xt"], name="squash"),
             helper.make_node("LSTM", ["Xt", "W", "R", "B"], ["Y", ""], name="rnn",
                              hidden_size=H)]
    path = _model(tmp_path / "net.onnx", nodes, _inits(native))
    data = np.random.default_rng(0).normal(0, 2, (6, 3, I)).astype(np.float32)  # [T, B, I]
    np.save(tmp_path / "data.npy", data)
    result = harness.compare_models(module, path, inputs=tmp_path / "data.npy")
    assert result, [o.reason for p in result.pairings for o in p.all_outputs]
    (p,) = result.pairings
    np.testing.assert_allclose(p.outputs.figures.inputs.x, np.tanh(data).transpose(1, 0, 2),
                               rtol=1e-6)
    assert "the data run through the shipped model up to the node" in p.outputs.reason
    # a port's layer gets the data directly, batch-major
    torch.save(module.state_dict(), tmp_path / "port.pt")
    np.save(tmp_path / "direct.npy", data.transpose(1, 0, 2))
    code, out, err = _cli(capsys, path, tmp_path / "port.pt", "--inputs",
                          tmp_path / "direct.npy")
    assert code == 0, out + err
    # shapes that fit neither: one line
    np.save(tmp_path / "bad.npy", np.zeros((2, 5, I + 1), np.float32))
    for original, shipped in ((module, path), (path, tmp_path / "port.pt")):
        with pytest.raises(harness.errors.HarnessError, match="--inputs") as exc:
            harness.compare_models(original, shipped, inputs=tmp_path / "bad.npy")
        assert "\n" not in str(exc.value)
    code, out, err = _cli(capsys, tmp_path / "port.pt", path, "--inputs", tmp_path / "bad.npy")
    assert code == 2 and err.count("\n") == 1 and "--inputs" in err


def test_bad_input_is_one_line_naming_the_file(lstm, exported, capsys, tmp_path: Path) -> None:
    module, native = lstm
    none = _model(tmp_path / "none.onnx", [helper.make_node("Identity", ["X"], ["Y"])], [])
    gru = helper.make_node("GRU", ["X", "W", "R"], ["Y", ""], name="g", hidden_size=H)
    gru_path = _model(tmp_path / "gru.onnx", [gru], [
        numpy_helper.from_array(np.zeros((1, 3 * H, I), np.float32), "W"),
        numpy_helper.from_array(np.zeros((1, 3 * H, H), np.float32), "R")])
    damaged = tmp_path / "damaged.onnx"
    damaged.write_bytes(exported["onnx"].read_bytes()[:200])
    external = onnx.load(str(exported["onnx"]))
    t = external.graph.initializer[0]
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    t.external_data.add(key="location", value="../../etc/passwd")
    hostile = tmp_path / "hostile.onnx"
    hostile.write_bytes(external.SerializeToString())
    checked = 0
    for shipped, words in ((none, "no recurrent layer"), (gru_path, "no layer of the same cell"),
                           (damaged, "ONNX model"), (hostile, "external data")):
        code, out, err = _cli(capsys, exported["pt"], shipped)
        assert code == 2 and out == "", (shipped, out)
        assert err.count("\n") == 1 and str(shipped) in err and words in err, err
        checked += 1
    assert checked == 4
