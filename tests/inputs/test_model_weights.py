"""A framework's own file as a case's weights (``weights: {file: model.pt}``): read by the
format readers under the untrusted-file rules, the layout told by the file where it is
unambiguous, what the file says checked against the case, field by field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.errors import WeightsError
from harness.layouts import get_layout
from harness.npz import save_npz
from harness.params import generate
from harness.prepare import load_weights
from harness.spec import Case

CASE = "name: mine\ncell: {cell}\ninput_size: 2\nhidden_size: {H}\nbatch: 2\nseq_len: 4\n"


def _case_file(folder: Path, weights: str, cell: str = "lstm", H: int = 3) -> Path:
    path = folder / "case.yaml"
    path.write_text(CASE.format(cell=cell, H=H) + f"weights: {weights}\n")
    return path


def _with_weights(case: Case, file: str, folder: Path) -> Case:
    """``case`` as a case file in ``folder`` would give it, with ``weights: {file: FILE}``."""
    return Case.model_validate({**case.model_dump(), "weights": {"file": file},
                                "source": str(folder / "c.yaml")})


def _run(case: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    code = main(["run", str(case), "--adapters", "reference,torch-cpu", "--quiet", "--out",
                 str(tmp_path / "report")])
    return code, capsys.readouterr().err


def test_a_torch_state_dict_saved_as_users_save_it_runs_as_a_case(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.LSTM(2, 3, batch_first=True)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    case = _case_file(tmp_path, "{file: model.pt}")
    code, err = _run(case, tmp_path, capsys)
    assert code == 0, err
    # the weights the case runs are the module's, bit for bit
    from harness.cases import load_cases

    canonical = load_weights(load_cases(case)[0])
    native = get_layout("torch").to_native(canonical, load_cases(case)[0])
    for name, t in model.state_dict().items():
        np.testing.assert_array_equal(native[name], t.numpy().astype(np.float64))


def test_what_the_file_says_is_checked_against_the_case(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    torch.save(torch.nn.GRU(2, 3).state_dict(), tmp_path / "model.pth")
    code, err = _run(_case_file(tmp_path, "{file: model.pth}", H=4, cell="gru"), tmp_path,
                     capsys)
    assert code == 2
    assert "model.pth: hidden_size: the file holds 3, the case says 4 (weights.file of " in err
    assert "case.yaml:7)" in err
    code, err = _run(_case_file(tmp_path, "{file: model.pth}", cell="lstm"), tmp_path, capsys)
    assert code == 2 and "model.pth: cell: the file holds gru, the case says lstm" in err
    code, err = _run(_case_file(tmp_path, "{file: model.pth, layout: keras}", cell="gru"),
                     tmp_path, capsys)
    assert code == 2 and "weights.layout: the file holds 'torch' tensors, not 'keras'" in err
    assert not (tmp_path / "report").exists()


def test_an_npz_layout_is_inferred_where_its_tensors_fit_one_layout(tmp_path):
    case = Case(name="n", cell="gru", input_size=2, hidden_size=3)
    canonical = generate(case)
    save_npz(tmp_path / "w.npz", get_layout("keras").to_native(canonical, case))
    for k, v in load_weights(_with_weights(case, "w.npz", tmp_path)).tensors.items():
        np.testing.assert_array_equal(v, np.asarray(canonical.tensors[k], dtype=np.float32))


def test_an_onnx_model_file_is_case_weights(tmp_path, capsys):
    pytest.importorskip("onnx")
    pytest.importorskip("torch")
    case = Case(name="o", cell="lstm", input_size=2, hidden_size=3)
    save_npz(tmp_path / "w.npz", get_layout("torch").to_native(generate(case), case))
    assert main(["convert", "--case", str(_case_file(tmp_path, "{file: w.npz}")),
                 str(tmp_path / "w.npz"), str(tmp_path / "model.onnx")]) == 0
    code, err = _run(_case_file(tmp_path, "{file: model.onnx}"), tmp_path, capsys)
    assert code == 0, err


def test_a_model_file_of_no_known_kind_is_refused(tmp_path, capsys):
    (tmp_path / "model.ckpt").write_bytes(b"\0" * 16)
    code, err = _run(_case_file(tmp_path, "{file: model.ckpt}"), tmp_path, capsys)
    assert code == 2 and "model.ckpt: unknown weights file type '.ckpt'" in err
    case = Case(name="d", cell="lstm", input_size=2, hidden_size=3)
    with pytest.raises(WeightsError, match="weights file is a folder"):
        load_weights(_with_weights(case, ".", tmp_path))


def test_a_model_with_two_rnn_modules_needs_weights_select(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    state = {**{f"enc.{k}": v for k, v in torch.nn.GRU(2, 3).state_dict().items()},
             **{f"dec.{k}": v for k, v in torch.nn.GRU(2, 3).state_dict().items()}}
    torch.save(state, tmp_path / "two.pt")
    code, err = _run(_case_file(tmp_path, "{file: two.pt}", cell="gru"), tmp_path, capsys)
    assert code == 2 and "two.pt: several RNN modules" in err
    assert "choose one with weights.select" in err
    code, err = _run(_case_file(tmp_path, "{file: two.pt, select: dec}", cell="gru"), tmp_path,
                     capsys)
    assert code == 0, err


def test_the_schema_takes_a_model_file_and_its_select():
    jsonschema = pytest.importorskip("jsonschema")
    from harness.spec import json_schema

    case = {"name": "m", "cell": "lstm", "input_size": 2, "hidden_size": 3}
    schema = json_schema()
    jsonschema.validate({**case, "weights": {"file": "model.pt"}}, schema)
    jsonschema.validate({**case, "weights": {"file": "m.keras", "select": "enc"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**case, "weights": {"file": "model.pt", "selct": "enc"}}, schema)
    assert ".pt" in schema["$defs"]["TensorFile"]["properties"]["file"]["description"]
