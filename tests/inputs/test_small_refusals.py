"""Small inputs that were quietly taken for something else (issue 53, item 8): a boolean for a
quantization number, a ``weights.select`` an .npz ignored, and ``$RNN_HARNESS_JOBS`` blamed on
a ``--jobs`` the user did not pass. Each is refused with exit 2 and one line naming where the
mistake is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.cli.run import JOBS_ENV
from harness.layouts import LAYOUTS
from harness.readers import read_case_weights
from harness.spec import Case

BASE = "name: small\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 1\nseq_len: 2\n"


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


def one_line(code: int, err: list[str]) -> str:
    __tracebackhide__ = True
    assert code == 2 and len(err) == 1, f"got exit {code} and {err}, but should be 2 and one line"
    assert err[0].startswith("rnn-harness: error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize(("key", "value"), [("calibration_batches", "true"),
                                            ("min_sqnr_db", "true"), ("min_sqnr_db", "no")])
def test_a_boolean_quantization_number_is_refused(tmp_path: Path, capsys, key: str,
                                                  value: str) -> None:
    case = tmp_path / "q.yaml"
    case.write_text(BASE + f"quantization:\n  {key}: {value}\n")
    line = one_line(*cli(["run", str(case), "--adapters", "reference", "--out",
                          str(tmp_path / "rep")], capsys))
    assert f"{case}:8: quantization.{key}: expected a number, got the boolean" in line, line
    assert not (tmp_path / "rep").exists()


def _grouped_npz(path: Path) -> dict[str, np.ndarray]:
    """An .npz holding two nn.LSTM state_dicts, under ``enc.`` and ``dec/``."""
    case = Case.model_validate({"name": "w", "cell": "lstm", "input_size": 2, "hidden_size": 3})
    rng = np.random.default_rng(0)
    shapes = LAYOUTS["torch"].shapes(case)
    arrays = {f"{group}{name}": rng.standard_normal(shape)
              for group in ("enc.", "dec/") for name, shape in shapes.items()}
    np.savez(path, **arrays)
    return arrays


def test_weights_select_picks_a_group_of_an_npz(tmp_path: Path) -> None:
    arrays = _grouped_npz(tmp_path / "w.npz")
    case = Case.model_validate({"name": "w", "cell": "lstm", "input_size": 2, "hidden_size": 3})
    checked = 0
    for group in ("enc", "dec", "dec/"):
        layout, native, _ = read_case_weights(tmp_path / "w.npz", case, select=group)
        prefix = group if group.endswith("/") else group + ("." if group == "enc" else "/")
        assert layout == "torch"
        assert set(native) == set(LAYOUTS["torch"].shapes(case))
        for name, a in native.items():
            np.testing.assert_array_equal(a, arrays[prefix + name])
        checked += 1
    assert checked == 3


def test_a_select_naming_no_group_of_an_npz_is_refused(tmp_path: Path, capsys) -> None:
    _grouped_npz(tmp_path / "w.npz")
    case = tmp_path / "c.yaml"
    case.write_text(BASE + "weights: {file: w.npz, select: encoder}\n")
    line = one_line(*cli(["run", str(case), "--adapters", "reference", "--out",
                          str(tmp_path / "rep")], capsys))
    assert f"{tmp_path / 'w.npz'}: select 'encoder' names no group" in line, line
    assert "its groups: 'dec', 'enc'" in line, line


@pytest.mark.parametrize("value", ["-1", "many"])
def test_a_bad_jobs_variable_is_named_not_the_flag(tmp_path: Path, capsys, monkeypatch,
                                                   value: str) -> None:
    case = tmp_path / "c.yaml"
    case.write_text(BASE)
    monkeypatch.setenv(JOBS_ENV, value)
    line = one_line(*cli(["run", str(case), "--adapters", "reference", "--out",
                          str(tmp_path / "rep")], capsys))
    assert f"error: {JOBS_ENV}: expected a number of worker processes >= 0" in line, line
    assert "--jobs" not in line
    monkeypatch.delenv(JOBS_ENV)
    line = one_line(*cli(["run", str(case), "--jobs", "-1"], capsys))
    assert "error: --jobs: expected" in line, line
