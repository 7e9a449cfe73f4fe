"""``rnn-harness compare`` and ``harness.compare_models``: a shipped model against the one it
came from, layer by layer. The issue's case: a Keras GRU (reset_after) and its torch hand port,
right and with z and r swapped; bad input (no recurrent layer, layers that cannot pair, a
damaged file) as one line and exit 2. Every fixture is built here with the frameworks."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.adapters import ADAPTERS
from harness.cli import main
from harness.compare import PASS, UNAVAILABLE
from harness.judges import Verdict
from harness.models.judges.pairing import PairingFigures
from harness.models.judges.shipped import ShippedFigures
from harness.models.render import as_dict, markdown, text

torch = pytest.importorskip("torch")

I, H = 3, 4


def _torch_port(kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray, order: str):
    """An nn.GRU holding Keras GRU weights: Keras keeps the gate blocks z, r, h along the
    kernels' last axis ([I, 3H], [H, 3H]) and, reset_after, the input and recurrent biases as
    the rows of bias [2, 3H]; torch keeps them r, z, n along weight_ih's first axis ([3H, I]).
    ``order``: the Keras blocks in the order the port writes them (``rzh`` is right)."""

    def blocks(a: np.ndarray) -> np.ndarray:
        by_gate = dict(zip("zrh", np.split(a, 3, axis=-1), strict=True))
        return np.concatenate([by_gate[g] for g in order], axis=-1)

    gru = torch.nn.GRU(I, H, batch_first=True)
    state = {"weight_ih_l0": blocks(kernel).T, "weight_hh_l0": blocks(recurrent).T,
             "bias_ih_l0": blocks(bias[0]), "bias_hh_l0": blocks(bias[1])}
    gru.load_state_dict({k: torch.tensor(np.ascontiguousarray(v)) for k, v in state.items()})
    return gru


@pytest.fixture(scope="module")
def keras_gru(tmp_path_factory):
    """A Keras 3 GRU (reset_after, nonzero biases) saved as .keras, its right torch port and
    the port with z and r swapped, each as a module and a .pt state_dict."""
    reason = ADAPTERS["keras3"].unavailable_reason()
    if reason:
        pytest.skip(reason)
    _, keras = ADAPTERS["keras3"].import_keras()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, I)),
                              keras.layers.GRU(H, reset_after=True, return_sequences=True,
                                               name="gru")])
    kernel, recurrent, bias = model.layers[0].get_weights()
    bias = np.random.default_rng(1).uniform(-0.5, 0.5, bias.shape).astype(np.float32)
    model.layers[0].set_weights([kernel, recurrent, bias])
    folder = tmp_path_factory.mktemp("compare")
    model.save(folder / "trained.keras")
    found = {"model": model, "original": folder / "trained.keras"}
    for name, order in (("right", "rzh"), ("swapped", "zrh")):
        found[name] = _torch_port(kernel, recurrent, bias, order)
        torch.save(found[name].state_dict(), folder / f"{name}.pt")
        found[f"{name}.pt"] = folder / f"{name}.pt"
    return found


def _cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.keras
def test_the_right_port_of_a_keras_gru_is_the_same(keras_gru, capsys, tmp_path: Path) -> None:
    code, out, err = _cli(capsys, keras_gru["original"], keras_gru["right.pt"],
                          "--out", tmp_path / "report")
    assert code == 0, out + err
    assert out.splitlines()[-2].startswith("same: every recurrent layer of ")
    report = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert report["same"] is True
    assert [(p["weights"]["status"], p["outputs"]["status"], p["outputs"]["adapter"])
            for p in report["pairings"]] == [("pass", "pass", "torch-cpu")]
    # objects, as a user holds them after training and porting
    result = harness.compare_models(keras_gru["model"], keras_gru["right"])
    assert result
    assert [(p.shipped.path, [o.path for o in p.originals], p.agreed)
            for p in result.pairings] == [("state_dict", ["gru"], True)]


@pytest.mark.keras
def test_z_and_r_swapped_is_named_with_its_tensors(keras_gru, capsys) -> None:
    code, out, err = _cli(capsys, keras_gru["original"], keras_gru["swapped.pt"])
    assert code == 1, out + err
    gate_order = "gate blocks of every tensor are in the order z, r, n, not r, z, n"
    assert out.splitlines()[-1].startswith("differs: 1 of 1 layer(s)")
    assert gate_order in out.splitlines()[-1]
    assert "weight_ih_l0 [0:H, :]: holds W_z, read as W_r" in out
    assert "bias_hh_l0 [H:2H]: holds bR_r, read as bR_z" in out
    result = harness.compare_models(keras_gru["original"], keras_gru["swapped"])
    assert not result
    (pairing,) = result.pairings
    assert pairing.mistakes == (gate_order,)
    assert (pairing.weights.status, pairing.outputs.status) == ("DIVERGED", "DIVERGED")
    assert {r["tensor"] for r in pairing.weights.figures.mapping} == {
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    assert set(pairing.weights.figures.tensors) == {
        f"forward/{k}_{g}" for k in ("W", "R", "bW", "bR") for g in "rz"}


# Torch alone: cheap, the rules of pairing and of bad input --------------------------------------

@pytest.fixture(scope="module")
def torch_files(tmp_path_factory) -> dict[str, Path]:
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("compare-torch")
    modules = {"gru": torch.nn.GRU(I, H), "gru5": torch.nn.GRU(I, H + 1),
               "lstm": torch.nn.LSTM(I, H), "linear": torch.nn.Linear(I, H),
               "stack": torch.nn.GRU(I, H, num_layers=2)}
    files = {}
    for name, module in modules.items():
        files[name] = folder / f"{name}.pt"
        torch.save(module.state_dict(), files[name])
    files["damaged"] = folder / "damaged.pt"
    files["damaged"].write_bytes(files["gru"].read_bytes()[:200])
    files["damaged.keras"] = folder / "damaged.keras"
    files["damaged.keras"].write_bytes(b"PK\x03\x04 not a whole zip")
    return files


def test_a_stacked_gru_is_one_layer_per_stacked_layer(torch_files) -> None:
    result = harness.compare_models(torch_files["stack"], torch_files["stack"])
    assert result
    assert [(p.shipped.path, p.original.path, p.shipped.case.input_size)
            for p in result.pairings] == [("state_dict/layer0", "state_dict/layer0", I),
                                          ("state_dict/layer1", "state_dict/layer1", H)]
    one = harness.compare_models(torch_files["stack"], torch_files["stack"],
                                 select="state_dict/layer1")
    assert [p.shipped.path for p in one.pairings] == ["state_dict/layer1"]
    with pytest.raises(harness.HarnessError, match="names 2 layers of .*: choose one of "
                                                   "'state_dict/layer0', 'state_dict/layer1'"):
        harness.compare_models(torch_files["stack"], torch_files["stack"], select="state_dict")


def test_a_mistake_in_a_stacked_layer_is_named_in_the_files_terms(torch_files, tmp_path) -> None:
    """The doctor and the outputs read the stacked layer alone, as a one-layer module; what
    they say names the file's tensor (``weight_hh_l1``) and layer (1), not the one-layer
    reading's (``weight_hh_l0``, layer 0)."""
    import torch

    state = torch.load(torch_files["stack"], weights_only=True)
    w = state["weight_hh_l1"].clone()  # GRU rows r, z, n: r and z swapped in layer 1
    state["weight_hh_l1"] = torch.cat([w[H:2 * H], w[:H], w[2 * H:]])
    torch.save(state, tmp_path / "port.pt")
    result = harness.compare_models(torch_files["stack"], tmp_path / "port.pt")
    assert not result
    (same, differs) = result.pairings
    assert same.same and not differs.same
    assert differs.mistakes == ("R gate blocks of `weight_hh` are in the order z, r, n, not "
                                "r, z, n",), differs.mistakes
    tensors = {r["tensor"] for r in differs.weights.figures.mapping}
    assert tensors == {"weight_hh_l1"}, tensors
    assert "y L1 " in differs.outputs.reason, differs.outputs.reason


@pytest.mark.parametrize("shipped, says", [
    ("linear", "linear.pt: no recurrent layer (LSTM or GRU) in the file"),
    ("lstm", "lstm.pt: layer 'state_dict' (LSTM I=3 H=4 forward) has no layer of the same "
             "cell, sizes and direction in "),
    ("gru5", "gru5.pt: layer 'state_dict' (GRU I=3 H=5 forward) has no layer of the same "
             "cell, sizes and direction in "),
    ("damaged", "damaged.pt: a damaged torch.save file"),
])
def test_bad_input_is_one_line_naming_the_file(torch_files, capsys, shipped: str,
                                               says: str) -> None:
    code, out, err = _cli(capsys, torch_files["gru"], torch_files[shipped])
    assert (code, out) == (2, "")
    assert err.startswith("rnn-harness: error: ") and says in err, err
    assert err.count("\n") == 1


def test_a_damaged_original_is_one_line_naming_it(torch_files, capsys) -> None:
    code, out, err = _cli(capsys, torch_files["damaged.keras"], torch_files["gru"])
    assert (code, out) == (2, "")
    assert "damaged.keras: not a readable .keras file" in err and err.count("\n") == 1, err


def test_out_refuses_a_folder_of_someone_else_before_comparing(torch_files, capsys,
                                                               tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, out, err = _cli(capsys, torch_files["gru"], torch_files["gru"], "--out", tmp_path)
    assert (code, out) == (2, "")
    assert "holds other files than a compare report ('notes.txt')" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# Compare's verdicts: the core's Verdict, shown through their figures -------------------------

def _with_outputs(result: harness.ModelComparison, *outputs: Verdict
                  ) -> harness.ModelComparison:
    (p,) = result.pairings
    p = dataclasses.replace(p, outputs=outputs[0], more_outputs=outputs[1:])
    return dataclasses.replace(result, pairings=(p,))


@dataclasses.dataclass(frozen=True)
class _Dummy(PairingFigures):
    def heading(self) -> str:
        return "dummy check"

    def cell(self, status: str) -> str:
        return f"{status} (dummy cell)"

    def summary(self, status: str) -> str:
        return f"the dummy says {status}"

    def lines(self) -> list[str]:
        return ["a dummy line"]

    def table(self) -> tuple[list[str], list[list[str]]]:
        return ["what", "value"], [["dummy row", "42"]]

    def record(self) -> dict:
        return {"dummy": {"value": 42}}


def test_compares_verdicts_are_core_verdicts_shown_through_their_figures(torch_files) -> None:
    result = harness.compare_models(torch_files["gru"], torch_files["gru"])
    (p,) = result.pairings
    assert all(isinstance(v, Verdict) for v in p.verdicts) and len(p.verdicts) == 2
    assert [(v.kind, v.status) for v in p.verdicts] == [("weights", PASS),
                                                         ("shipped-outputs", PASS)]
    assert p.outputs.rows is not None and len(p.outputs.rows) > 0  # the run's rows
    # a verdict of another judge, with figures of its own, is shown as they say
    mine = _with_outputs(result, Verdict("dummy", PASS, "the dummy reason", figures=_Dummy()))
    md = markdown(mine)
    assert "- dummy check: **pass**: the dummy reason" in md
    assert re.search(r"^\| what +\| +value \|$", md, re.M)
    assert re.search(r"^\| dummy row \| +42 \|$", md, re.M)
    assert "pass (dummy cell)" in md  # the table's cell
    assert as_dict(mine)["pairings"][0]["outputs"] == {
        "kind": "dummy", "status": PASS, "reason": "the dummy reason", "dummy": {"value": 42}}
    bad = _with_outputs(result, Verdict("dummy", "DIVERGED", "the dummy reason",
                                        figures=_Dummy()))
    assert not bad
    said = text(bad).splitlines()
    assert "  dummy check: the dummy reason" in said and "    a dummy line" in said
    assert said[-1].endswith("'state_dict': the dummy says DIVERGED")


def test_outputs_not_run_are_said_plainly_and_only_with_a_reason(torch_files) -> None:
    result = harness.compare_models(torch_files["gru"], torch_files["gru"])
    ran = result.pairings[0].outputs
    absent = Verdict("shipped-outputs", UNAVAILABLE, "the runtime is not installed here",
                     figures=ShippedFigures(adapter="openvino"))
    mine = _with_outputs(result, ran, absent)
    assert mine  # the weights agree, torch-cpu passed: the same, by what did run
    said = text(mine).splitlines()
    assert ("  outputs (openvino): not run here (unavailable): the runtime is not installed "
            "here") in said
    assert said[-1].endswith("not run here for 1 layer(s): outputs (openvino) (judged without "
                             "them; why above)")
    assert "- outputs (openvino): **unavailable**: the runtime is not installed here" in (
        markdown(mine))
    # a verdict that cannot say why it was not run passes nothing
    silent = _with_outputs(result, ran, dataclasses.replace(absent, reason=UNAVAILABLE))
    assert not silent
    assert text(silent).splitlines()[-1].endswith("'state_dict': outputs unavailable (openvino)")
