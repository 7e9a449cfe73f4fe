"""Every recurrent layer of a deployed ONNX file is found (issue 56, item 2): LSTM/GRU nodes in
``If``/``Loop``/``Scan`` bodies, their weights folded from constant chains (in subgraphs, through
enclosing scopes, in half precision), input-dependent weights named, hostile chains refused in
one line. Fixtures are built in the test with torch and onnx.helper; each folded operator is
checked against ``onnx.reference`` in test_onnx_constant_folding.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.errors import WeightsError
from harness.layouts import get_layout
from harness.readers.onnx_layers import recurrent_layers
from harness.spec import Case

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_graphs import constant as _const  # noqa: E402
from support.onnx_graphs import initializer as _init  # noqa: E402
from support.onnx_graphs import save_model as _save  # noqa: E402

I, H = 3, 4
MiB = 1 << 20


def _branch(nodes, inits=(), outputs=("Y",)) -> onnx.GraphProto:
    return helper.make_graph(list(nodes), "b", [], [
        helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        list(inits))


def _if(then_nodes, else_nodes=(), name="cond_if", then_inits=()) -> onnx.NodeProto:
    else_nodes = else_nodes or [helper.make_node("Identity", ["X"], ["Y"], name="pass")]
    return helper.make_node("If", ["cond"], ["Y"], name=name,
                            then_branch=_branch(then_nodes, then_inits),
                            else_branch=_branch(else_nodes))


def _lstm(W: str, R: str, B: str = "", name: str = "rnn") -> onnx.NodeProto:
    return helper.make_node("LSTM", ["X", W, R, B], ["Yall", "Y"], name=name, hidden_size=H)


# torch's TorchScript export of an LSTMCell looped in an If branch -----------------------------

@pytest.fixture(scope="module")
def exported_cell(tmp_path_factory):
    """An ``nn.LSTMCell`` looped over time under a data-dependent ``if``, scripted and exported
    by the TorchScript exporter: an ``If`` whose then-branch holds a ``Loop`` whose body holds
    the LSTM node, its W, R, B Slices/Concats/Unsqueezes of the main graph's initializers."""
    torch = pytest.importorskip("torch")
    import warnings

    class Looped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = torch.nn.LSTMCell(I, H)

        def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
            h = torch.zeros(x.shape[1], 4)  # H: scripting reads no closed-over ints
            c = torch.zeros(x.shape[1], 4)
            if bool(flag.sum() > 0):
                for t in range(x.shape[0]):
                    h, c = self.cell(x[t], (h, c))
            return h

    torch.manual_seed(0)
    module = Looped()
    path = tmp_path_factory.mktemp("cell") / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(module), (torch.randn(5, 1, I), torch.ones(1)),
                          str(path), dynamo=False, opset_version=17)
    state = {f"{k}_l0": v.detach().numpy() for k, v in module.cell.state_dict().items()}
    return path, state


def _canonical_of_torch(state: dict, case: Case) -> dict[str, np.ndarray]:
    return get_layout("torch").from_native(state, case).tensors


def test_the_torchscript_cell_in_an_if_branch_is_found_and_folded(exported_cell):
    path, state = exported_cell
    layers = recurrent_layers(path, 64 * MiB)
    assert len(layers) == 1
    layer = layers[0]
    assert layer.path == "main/If:then_branch/Loop:body/cell/LSTM"
    assert layer.where == ("LSTM node '/cell/LSTM' in the body of '/Loop' in the then-branch of "
                           "'/If'")
    assert (layer.op_type, layer.direction, layer.hidden_size, layer.input_size) == (
        "LSTM", "forward", H, I)
    assert layer.dtypes == {"W": "FLOAT", "R": "FLOAT", "B": "FLOAT"}
    # the chain is really the exporter's: the node's W is not an initializer
    assert not layer.input_name("W").startswith("cell.")
    arrays = layer.arrays()
    assert {k: v.shape for k, v in arrays.items()} == {
        "W": (1, 4 * H, I), "R": (1, 4 * H, H), "B": (1, 8 * H)}
    case = Case(name="c", cell="lstm", input_size=I, hidden_size=H)
    canonical = get_layout("onnx").from_native(arrays, case).tensors
    expected = _canonical_of_torch(state, case)
    assert set(canonical) == set(expected) and len(expected) == 16
    for k, v in expected.items():
        np.testing.assert_array_equal(canonical[k], v.astype(np.float64), err_msg=k)


def test_a_case_reads_the_cell_from_the_if_branch(exported_cell, tmp_path):
    """``weights: {file: model.onnx, layout: onnx}``: the sizes the file tells are checked and
    the case's weights are the module's, bit for bit; select by path reads the same."""
    from harness.cases import load_cases
    from harness.prepare import load_weights

    path, state = exported_cell
    case_file = tmp_path / "case.yaml"
    for select in ("", ", select: main/If:then_branch/Loop:body/cell/LSTM", ", select: /cell/LSTM"):
        case_file.write_text(f"name: cell\ncell: lstm\ninput_size: {I}\nhidden_size: {H}\n"
                             f"weights: {{file: {path}, layout: onnx{select}}}\n")
        case = load_cases(case_file)[0]
        canonical = load_weights(case).tensors
        for k, v in _canonical_of_torch(state, case).items():
            np.testing.assert_array_equal(canonical[k], v.astype(np.float64), err_msg=k)


@pytest.mark.roads
def test_a_case_on_the_exported_cell_runs(exported_cell, tmp_path, capsys):
    path, _ = exported_cell
    case_file = tmp_path / "case.yaml"
    case_file.write_text(f"name: cell\ncell: lstm\ninput_size: {I}\nhidden_size: {H}\nbatch: 2\n"
                         f"seq_len: 4\nweights: {{file: {path}, layout: onnx}}\n")
    code = main(["run", str(case_file), "--adapters", "reference,torch-cpu", "--quiet", "--out",
                 str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err


# weights in subgraphs, through enclosing scopes, in half precision ------------------------------

def _cell_chain(src: str, out: str, rows: int, prefix: str) -> list:
    """torch's pattern: the gate blocks sliced out of ``src`` (rows, cols), reordered i o f g
    -> by Concat, lifted by Unsqueeze (opset 17)."""
    block = rows // 4
    nodes, parts = [], []
    for k, g in enumerate((0, 3, 1, 2)):
        nodes += [_const(f"{prefix}s{k}", [g * block]), _const(f"{prefix}e{k}", [(g + 1) * block]),
                  _const(f"{prefix}a{k}", [0]),
                  helper.make_node("Slice", [src, f"{prefix}s{k}", f"{prefix}e{k}",
                                             f"{prefix}a{k}"], [f"{prefix}p{k}"],
                                   name=f"{prefix}slice{k}")]
        parts.append(f"{prefix}p{k}")
    nodes += [helper.make_node("Concat", parts, [f"{prefix}cat"], name=f"{prefix}concat", axis=0),
              _const(f"{prefix}u", [0]),
              helper.make_node("Unsqueeze", [f"{prefix}cat", f"{prefix}u"], [out],
                               name=f"{prefix}unsqueeze")]
    return nodes


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT16, TensorProto.BFLOAT16])
def test_half_precision_weights_fold_in_a_nested_branch(dtype, tmp_path):
    """float16 and bfloat16 initializers of the main graph, folded inside an If nested in a
    Loop body (lexical scope over two levels), keep their values and their stored type."""
    rng = np.random.default_rng(1)
    w, r = rng.normal(size=(4 * H, I)), rng.normal(size=(4 * H, H))
    inits = [helper.make_tensor(n, dtype, a.shape, a.astype(np.float32).ravel())
             for n, a in (("w_ih", w), ("w_hh", r))]
    inner = _if(_cell_chain("w_ih", "W", 4 * H, "a") + _cell_chain("w_hh", "R", 4 * H, "b")
                + [_lstm("W", "R")], name="inner_if")
    body = helper.make_graph([inner], "body", [
        helper.make_tensor_value_info("iter", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])])
    loop = helper.make_node("Loop", ["", "c"], [], name="loop", body=body)
    path = _save(tmp_path / "m.onnx", [loop], inits)
    (layer,) = recurrent_layers(path, MiB)
    assert layer.path == "main/loop:body/inner_if:then_branch/rnn"
    name = "FLOAT16" if dtype == TensorProto.FLOAT16 else "BFLOAT16"
    assert layer.dtypes == {"W": name, "R": name} and layer.input_size == I
    arrays = layer.arrays()
    stored = {k: numpy_helper.to_array(t).astype(np.float64) for k, t in
              zip(("W", "R"), inits, strict=True)}
    for k, a in stored.items():
        want = np.concatenate([a[g * H:(g + 1) * H] for g in (0, 3, 1, 2)])[None]
        np.testing.assert_array_equal(arrays[k], want)


def _two_branches(tmp_path: Path) -> Path:
    rng = np.random.default_rng(2)
    inits = [_init(n, rng.normal(size=s).astype(np.float32)) for n, s in (
        ("W1", (1, 4 * H, I)), ("R1", (1, 4 * H, H)), ("W2", (1, 4 * H, I)),
        ("R2", (1, 4 * H, H)))]
    node = _if([_lstm("W1", "R1", name="fast")], [_lstm("W2", "R2", name="slow")])
    return _save(tmp_path / "two.onnx", [node], inits)


def test_select_names_a_layer_by_path(tmp_path, capsys):
    path = _two_branches(tmp_path)
    assert [n.path for n in recurrent_layers(path)] == [
        "main/cond_if:then_branch/fast", "main/cond_if:else_branch/slow"]
    out = tmp_path / "o.npz"
    code = main(["convert", "--to", "torch", str(path), str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert ("the model has 2 LSTM nodes in 2 graphs (main/cond_if:then_branch/fast, "
            "main/cond_if:else_branch/slow): choose one with --select") in err[0]
    case = Case(name="c", cell="lstm", input_size=I, hidden_size=H)
    from harness.readers import read_native

    for select, W in (("main/cond_if:else_branch/slow", "W2"), ("fast", "W1")):
        native, notes = read_native(path, "onnx", case, select=select)
        want = numpy_helper.to_array(next(t for t in onnx.load(str(path)).graph.initializer
                                          if t.name == W))
        np.testing.assert_array_equal(native["W"], want.astype(np.float64))


# what is not a constant, and what is hostile ---------------------------------------------------

def test_weights_that_depend_on_a_graph_input_are_named(tmp_path, capsys):
    nodes = [_if(_cell_chain("w", "W", 4 * H, "a") + [_lstm("W", "R")])]
    path = _save(tmp_path / "in.onnx", nodes, [_init("R", np.zeros((1, 4 * H, H), np.float32))],
                 inputs=("w",))
    (layer,) = recurrent_layers(path)
    assert layer.input_size is None
    assert layer.problem == ("LSTM node 'rnn' in the then-branch of 'cond_if': its W depends on "
                             "the graph input 'w' (not a constant)")
    with pytest.raises(WeightsError, match="its W depends on the graph input 'w'"):
        layer.arrays()
    code = main(["convert", "--to", "torch", str(path), str(tmp_path / "o.npz")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"rnn-harness: error: {path}: {layer.problem}"]


def test_weights_computed_by_another_operator_are_named(tmp_path):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["W"], name="mm"), _lstm("W", "R")]
    inits = [_init("a", np.ones((1, 4 * H, 1), np.float32)),
             _init("b", np.ones((1, 1, I), np.float32)),
             _init("R", np.zeros((1, 4 * H, H), np.float32))]
    (layer,) = recurrent_layers(_save(tmp_path / "mm.onnx", nodes, inits))
    assert layer.problem.startswith("LSTM node 'rnn': its W is computed by node 'mm' (MatMul), "
                                    "which the reader does not fold (it folds Constant, ")


def _hostile(tmp_path: Path, name: str, nodes, inits=()) -> str:
    """The one line the reader refuses the model with (the model's W is ``W``)."""
    path = _save(tmp_path / f"{name}.onnx", [*nodes, _lstm("W", "R")],
                 [*inits, _init("R", np.zeros((1, 4 * H, H), np.float32))])
    with pytest.raises(WeightsError) as info:
        for layer in recurrent_layers(path, MiB):
            layer.arrays()
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: LSTM node 'rnn': its W "), text
    return text


def test_hostile_chains_are_refused_in_one_line(tmp_path):
    x = _init("x", np.zeros((1, 64, 1024), np.float32))  # 256 KiB
    checked = {
        "a Concat of 100000 inputs": (
            [helper.make_node("Concat", ["x"] * 10**5, ["W"], name="cat", axis=1)], [x],
            "node 'cat' (Concat), which has 100000 inputs, more than the 4096"),
        "a Concat past the memory limit": (
            [helper.make_node("Concat", ["x"] * 8, ["W"], name="cat", axis=1)], [x],
            "node 'cat' (Concat), which would make 'W' dims [1, 512, 1024] of FLOAT: "
            "2097152 bytes, more than the memory limit of 1048576"),
        "a Reshape to a huge shape": (
            [_const("sh", [1, 10**12, 10**12]),
             helper.make_node("Reshape", ["x", "sh"], ["W"], name="re")], [x],
            "node 're' (Reshape), which reshapes 65536 elements"),
        "a cycle of names": (
            [helper.make_node("Identity", ["b"], ["W"], name="i1"),
             helper.make_node("Identity", ["W"], ["b"], name="i2")], [],
            "its W reaches 'W' again (a cycle of names)"),
        "a chain too deep": (
            [helper.make_node("Identity", [f"t{k + 1}"], [f"t{k}" if k else "W"], name=f"i{k}")
             for k in range(150)] + [_const("t150", np.zeros((1, 4 * H, I)), np.float32)], [],
            "its chain is more than 100 nodes deep"),
        "a Gather out of range": (
            [_const("ix", [70]), helper.make_node("Gather", ["x", "ix"], ["W"], name="g",
                                                  axis=1)], [x],
            "node 'g' (Gather), which gathers index 70 of a dimension of 64"),
        "a fold of tensors past the limit together": (
            [helper.make_node("Concat", ["x"] * 3, ["y"], name="cat", axis=1),
             helper.make_node("Slice", ["y", "s", "e", "a"], ["W"], name="sl"),
             _const("s", [0]), _const("e", [1]), _const("a", [1])], [x],
            "needs 1052672 bytes of tensors (3 of them) to fold 'W'"),
    }
    for what, (nodes, inits, words) in checked.items():
        text = _hostile(tmp_path, what.replace(" ", "-"), nodes, inits)
        assert words in text, (what, text)
    assert len(checked) == 7


def test_subgraphs_nested_past_the_bound_are_refused(tmp_path, capsys):
    from tests.inputs.test_malformed_onnx import _lstm_model, _nested_ifs, _with_node

    path = _with_node(_lstm_model(tmp_path / "deep.onnx"), _nested_ifs(33))
    with pytest.raises(WeightsError, match="subgraphs nested more than 32 deep"):
        recurrent_layers(path)
    # 10 deep, the LSTM at the bottom reading the main graph's initializers, is found
    graph = _branch([_lstm("W", "R", name="bottom")])
    for k in range(10):
        graph = _branch([helper.make_node("If", ["cond"], ["Y"], name=f"if{k}",
                                          then_branch=graph, else_branch=_branch([]))])
    inits = [_init("W", np.ones((1, 4 * H, I), np.float32)),
             _init("R", np.ones((1, 4 * H, H), np.float32))]
    path = _save(tmp_path / "ten.onnx", graph.node, inits)
    (layer,) = recurrent_layers(path)
    assert layer.path.count(":then_branch") == 10 and layer.path.endswith("/bottom")
    assert layer.arrays()["W"].sum() == 4 * H * I
