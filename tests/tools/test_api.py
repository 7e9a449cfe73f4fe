"""The public Python API (``harness.check``, ``make_case``, ``case_inputs``,
``expected_outputs``, ``diagnose``), used as a user would: a framework's own module or model
as the weights, its own outputs as the expected outputs. Expected values are never written
down here: they are the harness's own float64 reference of the same case."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.prepare import prepare

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ["reference", "torch-cpu"]


def _reference(case: harness.Case) -> dict[str, np.ndarray]:
    """The harness's own float64 reference outputs of ``case``."""
    return prepare(case).reference.named()


def test_importing_harness_imports_no_framework_and_not_the_api_yet():
    code = ("import sys, harness\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'keras', 'jax', 'onnx', "
            "'harness.api', 'harness.runner', 'pandas') if m in sys.modules))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["[]"]
    assert harness.check.__module__ == "harness.api.check" and "check" in dir(harness)
    assert set(harness.__all__) >= {"check", "make_case", "case_inputs", "expected_outputs",
                                    "diagnose", "CheckResult", "PairCheck", "Divergence"}
    for name in harness.__all__:
        assert getattr(harness, name) is not None


def test_a_user_checks_a_torch_gru_module_and_gets_a_typed_result(tmp_path):
    torch.manual_seed(0)
    gru = torch.nn.GRU(input_size=2, hidden_size=3, num_layers=2, bidirectional=True,
                       batch_first=True)
    result = harness.check({"batch": 2, "seq_len": 4}, weights=gru, adapters=ADAPTERS,
                           out=tmp_path / "report")

    assert isinstance(result, harness.CheckResult) and result and result.passed
    assert [(p.adapter, p.verdict) for p in result.pairs] == [("reference", "baseline"),
                                                              ("torch-cpu", "pass")]
    pair = result.pair("torch-cpu")
    assert isinstance(pair, harness.PairCheck) and pair
    assert pair.first_divergence is None
    assert isinstance(pair.worst, harness.Divergence) and pair.worst.output in ("y", "h_n")
    # a float32 framework: off the float64 reference, and well within the float32 tolerance
    assert 0 < pair.worst_error < 1e-5 and pair.worst.tol_ratio < 1
    assert result.report == tmp_path / "report" and (result.report / "run.json").is_file()
    assert not result.case_errors
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.verdict = "DIVERGED"
    # the module told the case what it is
    case = harness.make_case({"batch": 2, "seq_len": 4}, weights=gru)
    assert (case.cell, case.input_size, case.hidden_size, case.num_layers, case.dir_mode) == (
        "gru", 2, 3, 2, "bidirectional")


def test_a_diverging_pair_says_where_and_the_result_is_falsy():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(2, 3, batch_first=True)
    result = harness.check({"batch": 2, "seq_len": 4, "tolerance": {"atol": 0.0, "rtol": 0.0}},
                           weights=lstm, adapters=ADAPTERS)
    assert not result and not result.passed
    bad = result.pair("torch-cpu")
    assert bad.verdict == "DIVERGED" and not bad
    first = bad.first_divergence
    assert first.output == "y" and first.t == 0 and first.layer == 0 and first.direction == 0
    assert str(first) == "y L0 d0 t=0" and first.tol_ratio > 1
    assert result.failed_pairs == (bad,) and result.report is None
    assert set(result.rows["adapter"]) == {"torch-cpu"}


def test_a_case_built_in_code_is_validated_as_a_case_file_is():
    with pytest.raises(harness.CaseError, match=r"^case dict: seq_len: expected a valid integer"):
        harness.check({"cell": "lstm", "input_size": 2, "hidden_size": 3, "seq_len": "4"},
                      adapters=ADAPTERS)
    with pytest.raises(harness.CaseError, match=r"case dict: hiden_size: unknown key; did you "
                                                r"mean 'hidden_size'"):
        harness.make_case({"cell": "lstm", "input_size": 2, "hiden_size": 3})
    # a case from nothing but keys runs
    assert harness.check({"cell": "lstm", "input_size": 2, "hidden_size": 3, "batch": 2,
                          "seq_len": 3}, adapters=ADAPTERS)


def test_weights_that_contradict_the_case_name_the_object_and_the_field():
    gru = torch.nn.GRU(2, 3)
    with pytest.raises(harness.WeightsError,
                       match=r"^the torch GRU module: hidden_size: the file holds 3, the case "
                             r"says 5$"):
        harness.check({"batch": 2, "seq_len": 4, "hidden_size": 5}, weights=gru,
                      adapters=ADAPTERS)
    with pytest.raises(harness.HarnessError, match="expected a file path, a torch nn.Module"):
        harness.check({"batch": 2}, weights=[1, 2], adapters=ADAPTERS)


def test_torch_outputs_come_out_in_the_harness_order():
    torch.manual_seed(2)
    lstm = torch.nn.LSTM(2, 3, num_layers=2, bidirectional=True)  # time-major, as by default
    case = harness.make_case({"batch": 2, "seq_len": 5, "initial_state": "random",
                              "dtype": "float64"}, weights=lstm.double())
    inputs = harness.case_inputs(case)
    with torch.no_grad():
        out = lstm(torch.from_numpy(inputs.x).transpose(0, 1),
                   (torch.from_numpy(inputs.h0), torch.from_numpy(inputs.c0)))
    expected = harness.expected_outputs(out, case, framework="torch")
    reference = _reference(case)
    assert expected.keys() == reference.keys() == {"y", "h_n", "c_n"}
    for name, want in reference.items():
        np.testing.assert_allclose(expected[name], want, rtol=0, atol=1e-12, err_msg=name)
    gru = torch.nn.GRU(2, 3)
    with pytest.raises(harness.HarnessError, match="batch == seq_len"):
        harness.expected_outputs((torch.zeros(3, 3, 3), torch.zeros(1, 3, 3)),
                                 harness.make_case({"batch": 3, "seq_len": 3}, weights=gru),
                                 framework="torch")


def test_onnx_outputs_and_an_onnx_model_as_weights():
    pytest.importorskip("onnxruntime")
    import onnxruntime

    from harness.convert import onnx_model
    from harness.layouts import get_layout
    from harness.params import generate

    case = harness.make_case({"name": "o", "cell": "gru", "input_size": 2, "hidden_size": 3,
                              "direction": "bidirectional", "batch": 2, "seq_len": 4})
    model = onnx_model(case, get_layout("onnx").to_native(generate(case), case))
    from_model = harness.make_case({"batch": 2, "seq_len": 4}, weights=model)
    assert (from_model.cell, from_model.hidden_size, from_model.dir_mode) == (
        "gru", 3, "bidirectional")
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    x = harness.case_inputs(case).x.astype(np.float32).transpose(1, 0, 2)  # X is [T, N, I]
    Y, Y_h = session.run(["Y0", "Y_h0"], {"X": x})
    expected = harness.expected_outputs([Y, Y_h], case, framework="onnx")
    for name, want in _reference(case).items():
        np.testing.assert_allclose(expected[name], want, atol=1e-5, err_msg=name)
    only_y = harness.expected_outputs(Y, case, framework="onnx")
    batch_major = harness.expected_outputs(Y.transpose(2, 0, 1, 3), case, framework="onnx")
    assert only_y.keys() == batch_major.keys() == {"y"}  # layout=1's Y is [B, T, D, H]
    np.testing.assert_array_equal(only_y["y"], expected["y"])
    np.testing.assert_array_equal(batch_major["y"], expected["y"])


def test_the_doctor_from_code_finds_a_gate_order_mistake():
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(2, 3, batch_first=True)
    case = harness.make_case({"batch": 2, "seq_len": 5}, weights=lstm)
    with torch.no_grad():
        out = lstm(torch.from_numpy(harness.case_inputs(case).x).float())
    expected = harness.expected_outputs(out, case, framework="torch")

    def swap_f_g(w: np.ndarray) -> np.ndarray:
        i, f, g, o = np.split(w, 4)
        return np.concatenate([i, g, f, o])

    mine = {k: swap_f_g(v.numpy()) for k, v in lstm.state_dict().items()}
    dx = harness.diagnose(case, weights=mine, layout="torch", expected=expected, budget_s=30)
    assert isinstance(dx, harness.Diagnosis) and dx.best is not None
    assert [m.id for m in dx.best.hypothesis] == ["order:all:igfo"]
    for name, t in lstm.state_dict().items():  # the fix is the module's own weights
        np.testing.assert_array_equal(dx.fixed[name], t.numpy().astype(np.float64))
