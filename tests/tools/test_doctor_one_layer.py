"""The doctor on a mistake in one layer or direction of a stacked or bidirectional cell, given
the outputs of the real framework (torch's nn.LSTM / nn.GRU): found layer by layer within its
budget, named by place, and fixed in the file from the command line."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from support.case_factory import case_file as _case_file
from support.case_factory import case_maker

from harness import data, params
from harness.cli import main
from harness.doctor import diagnose, diagnosis_dict, places_of, render
from harness.layouts import get_layout
from harness.npz import load_npz, save_npz
from harness.spec import Case

make = case_maker(name="planted", batch=2)


# Mistakes in one layer or direction, outputs from the real framework ---------------------------

def _torch_outputs(case: Case, native: dict[str, np.ndarray], inputs, names=("y", "h_n", "c_n")):
    """What torch's own nn.LSTM / nn.GRU (float32) gives on the state_dict ``native``."""
    torch = pytest.importorskip("torch")
    cls = torch.nn.LSTM if case.cell == "lstm" else torch.nn.GRU
    module = cls(case.input_size, case.hidden_size, num_layers=case.num_layers,
                 bidirectional=case.num_directions == 2, batch_first=True)
    module.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32))
                            for k, v in native.items()})
    x, h0 = (torch.from_numpy(a.astype(np.float32)) for a in (inputs.x, inputs.h0))
    with torch.no_grad():
        if case.cell == "lstm":
            y, (h_n, c_n) = module(x, (h0, torch.from_numpy(inputs.c0.astype(np.float32))))
            out = {"y": y, "h_n": h_n, "c_n": c_n}
        else:
            y, h_n = module(x, h0)
            out = {"y": y, "h_n": h_n}
    return {k: v.double().numpy() for k, v in out.items() if k in names}


def _swap_gates(a: np.ndarray, H: int) -> np.ndarray:
    """The first two gate blocks (LSTM i, f; GRU r, z) of a torch tensor swapped."""
    out = a.copy()
    out[:H], out[H:2 * H] = a[H:2 * H], a[:H]
    return out


def _misfile(native: dict[str, np.ndarray], H: int, mistake: str) -> dict[str, np.ndarray]:
    """The torch state_dict saved with one local mistake (what someone's export wrote)."""
    saved = dict(native)
    if mistake == "gates in layer 1":  # every tensor of layer 1, both directions
        for k in native:
            if "_l1" in k:
                saved[k] = _swap_gates(native[k], H)
    elif mistake == "gates in layer 0 backward, weight_hh only":
        saved["weight_hh_l0_reverse"] = _swap_gates(native["weight_hh_l0_reverse"], H)
    elif mistake == "gates in layer 1 backward":
        for k in native:
            if k.endswith("_l1_reverse"):
                saved[k] = _swap_gates(native[k], H)
    elif mistake.startswith("directions of layer "):
        layer = mistake[-1]
        for k in native:
            if k.endswith(f"_l{layer}"):
                saved[k], saved[f"{k}_reverse"] = native[f"{k}_reverse"], native[k]
    else:
        raise AssertionError(mistake)
    return saved


LOCAL = [  # (cell, mistake in the saved file, where the doctor must say it is)
    ("lstm", "gates in layer 1", ["layer 1, forward", "layer 1, backward"]),
    ("lstm", "gates in layer 1 backward", ["layer 1, backward"]),
    ("lstm", "gates in layer 0 backward, weight_hh only", ["layer 0, backward"]),
    ("lstm", "directions of layer 1", ["layer 1 (directions swapped)"]),
    ("lstm", "directions of layer 0", ["layer 0 (directions swapped)"]),
    ("gru", "gates in layer 1", ["layer 1, forward", "layer 1, backward"]),
    ("gru", "gates in layer 1 backward", ["layer 1, backward"]),
    ("gru", "directions of layer 0", ["layer 0 (directions swapped)"]),
]


@pytest.mark.parametrize("cell, mistake, at", LOCAL, ids=[f"{c} {m}" for c, m, _ in LOCAL])
def test_doctor_finds_a_mistake_in_one_layer_or_direction(cell: str, mistake: str,
                                                          at: list[str]) -> None:
    """A 2-layer bidirectional nn.LSTM / nn.GRU saved with a mistake in one layer or one
    direction, the expected outputs from torch on the true weights: the doctor searches layer
    by layer on h_n (c_n), says where the mistake is, and writes weights that torch runs to
    the same outputs."""
    case = make(cell=cell, num_layers=2, bidirectional=True)
    lay = get_layout("torch")
    truth = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    expected = _torch_outputs(case, truth, inputs)
    saved = _misfile(truth, case.hidden_size, mistake)
    start = time.perf_counter()
    dx = diagnose(case, lay, saved, inputs, expected, budget_s=20)
    seconds = time.perf_counter() - start
    report = render(dx)
    assert dx.best is not None, report
    assert places_of(dx.best.hypothesis, case) == at, report
    assert dx.local is not None and dx.local.mode == "per-layer" and not dx.local.stopped
    assert "Each layer's final states" in report and f"Where: {'; '.join(at)}." in report
    # the corrected mapping shows the slices not as claimed and counts the rest (issue 32);
    # the JSON keeps every slice
    table = report.split("### Corrected mapping")[1].split("###")[0]
    n = len(dx.mapping)
    assert n == 4 * (4 if cell == "lstm" else 3) * 2 * 2  # W, R, bW, bR x gates x layers x dirs
    changed = [r for r in dx.mapping if r["actually"] != "same"]
    assert 0 < len(changed) < n
    assert table.count("\n| ") - 1 == len(changed) and "| same" not in table
    assert f"The {n - len(changed)} other slices (of {n}) hold what the layout claims" in table
    assert diagnosis_dict(dx)["corrected_mapping"] == dx.mapping
    got = _torch_outputs(case, dx.fixed, inputs)
    assert max(np.abs(got[k] - expected[k]).max() for k in expected) < 1e-5
    assert all(np.allclose(dx.fixed[k], truth[k], atol=1e-12) for k in truth)
    assert seconds < 10, f"{seconds:.1f} s, {dx.evaluated} hypotheses"


def _blocks(a: np.ndarray, H: int, order: list[int]) -> np.ndarray:
    """A torch tensor's gate blocks in ``order`` (indices of i, f, g, o)."""
    return np.concatenate([a[j * H:(j + 1) * H] for j in order])


TWO = {  # a hand port with two mistakes in layer 1 backward
    "i,f swapped in W, R and bias_ih; bias_hh dropped": lambda t, H: {
        **{k: _swap_gates(t[k], H) for k in ("weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                             "bias_ih_l1_reverse")},
        "bias_hh_l1_reverse": np.zeros_like(t["bias_hh_l1_reverse"])},
    "W and R in one wrong order, both biases in another": lambda t, H: {
        **{k: _swap_gates(t[k], H) for k in ("weight_ih_l1_reverse", "weight_hh_l1_reverse")},
        **{k: _blocks(t[k], H, [2, 3, 0, 1]) for k in ("bias_ih_l1_reverse",
                                                      "bias_hh_l1_reverse")}},
}


@pytest.mark.parametrize("mistakes", list(TWO))
def test_doctor_finds_two_mistakes_in_one_layer_and_direction(mistakes: str) -> None:
    """Two mistakes at one layer and direction (in the first, the gate order is not among the
    nearest singles): every pair is searched, and a bias half the file holds as zeros is fitted
    on top of each single. The corrected file gives torch's own outputs."""
    case = make(num_layers=2, bidirectional=True)
    lay = get_layout("torch")
    truth = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    expected = _torch_outputs(case, truth, inputs)
    saved = {**truth, **TWO[mistakes](truth, case.hidden_size)}
    dx = diagnose(case, lay, saved, inputs, expected, budget_s=40)
    report = render(dx)
    assert dx.best is not None and len(dx.best.hypothesis) == 2, report
    assert places_of(dx.best.hypothesis, case) == ["layer 1, backward"], report
    got = _torch_outputs(case, dx.fixed, inputs)
    assert max(np.abs(got[k] - expected[k]).max() for k in expected) < 1e-5
    untouched = [k for k in truth if not k.endswith("_l1_reverse")]
    assert all(np.array_equal(dx.fixed[k], truth[k]) for k in untouched)


def test_doctor_with_only_y_says_the_per_layer_search_is_not_possible() -> None:
    """Without h_n / c_n a lower layer cannot be judged alone: the doctor says so and what it
    searched instead, and still finds a single mistake confined to a lower layer's direction."""
    case = make(num_layers=2, bidirectional=True)
    lay = get_layout("torch")
    truth = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    expected = _torch_outputs(case, truth, inputs, names=("y",))
    saved = _misfile(truth, case.hidden_size, "gates in layer 0 backward, weight_hh only")
    dx = diagnose(case, lay, saved, inputs, expected, budget_s=20)
    report = render(dx)
    assert dx.best is not None, report
    assert places_of(dx.best.hypothesis, case) == ["layer 0, backward"]
    assert dx.local.mode == "y-only"
    assert "the per-layer search is not possible" in report
    assert "Searched instead:" in report and "each judged on y of the whole stack" in report
    assert "two mistakes in the lower layers at once were not searched" in report
    got = _torch_outputs(case, dx.fixed, inputs, names=("y",))
    assert np.abs(got["y"] - expected["y"]).max() < 1e-5


def test_layer_by_layer_search_keeps_to_its_budget() -> None:
    case = make(num_layers=2, bidirectional=True)
    lay = get_layout("torch")
    truth = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    expected = _torch_outputs(case, truth, inputs)
    saved = _misfile(truth, case.hidden_size, "gates in layer 0 backward, weight_hh only")
    start = time.perf_counter()
    dx = diagnose(case, lay, saved, inputs, expected, budget_s=0.0)
    assert time.perf_counter() - start < 5
    assert dx.best is None and dx.stopped and dx.local.stopped
    report = render(dx)
    assert "- layer 0, forward: right as claimed (1 hypothesis)" in report
    assert "- layer 0, backward: the search stopped at its time budget (--budget)" in report
    assert "- layer 1, backward: not searched (the time budget ran out)" in report
    data_ = diagnosis_dict(dx)
    assert data_["local_search"]["stopped_at_budget"] is True
    assert {p["status"] for p in data_["local_search"]["places"]} <= {
        "exact", "stopped", "not searched"}


def test_cli_doctor_fixes_a_one_layer_gate_swap_in_a_torch_file(tmp_path: Path, capsys) -> None:
    """The issue's example: a 2-layer bidirectional nn.LSTM saved with i and f swapped in
    layer 1, given torch's y, h_n, c_n."""
    case = make(num_layers=2, bidirectional=True)
    lay = get_layout("torch")
    truth = lay.to_native(params.generate(case), case)
    inputs = data.generate(case)
    expected = _torch_outputs(case, truth, inputs)
    save_npz(tmp_path / "w.npz", _misfile(truth, case.hidden_size, "gates in layer 1"))
    save_npz(tmp_path / "out.npz", expected)
    code = main(["doctor", "--case", str(_case_file(tmp_path / "c.yaml", case)), "--weights",
                 str(tmp_path / "w.npz"), "--layout", "torch", "--expected",
                 str(tmp_path / "out.npz"), "--write-fixed", str(tmp_path / "fixed.npz"),
                 "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    import json

    report = json.loads(out)
    assert report["where"] == ["layer 1, forward", "layer 1, backward"]
    assert [p["status"] for p in report["local_search"]["places"]] == [
        "exact", "exact", "fixed", "fixed"]
    got = _torch_outputs(case, load_npz(tmp_path / "fixed.npz"), inputs)
    assert max(np.abs(got[k] - expected[k]).max() for k in expected) < 1e-5
