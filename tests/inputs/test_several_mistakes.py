"""A case file with several mistakes names each one, with its line and field, in the one
``rnn-harness: error:`` line (``; `` between them), up to
:data:`harness.case_validation.MAX_MISTAKES_NAMED`; the rest are counted."""

from __future__ import annotations

from pathlib import Path

import pytest

import harness
from harness import case_validation
from harness.cli import main
from harness.errors import HarnessError

THREE = """\
name: bad
cell: lstm
input_size: 0
hidden_size: three
batch: 2
seq_len: 4
sed: 3
"""


def _error_line(capsys, *args: str) -> str:
    assert main(["run", *args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err  # bad input stays one line
    assert err.startswith("rnn-harness: error: ")
    return err.strip().removeprefix("rnn-harness: error: ")


def test_each_mistake_is_named_with_its_line_and_field(tmp_path: Path, capsys):
    case = tmp_path / "bad.yaml"
    case.write_text(THREE)
    got = _error_line(capsys, str(case), "--out", str(tmp_path / "r"))
    # the misspelled key first (it is also why a required key would be missing), then by line
    assert got.split(f"; {case}:") == [
        f"{case}:7: sed: unknown key; did you mean 'seed'?",
        "3: input_size: Input should be greater than or equal to 1, got 0",
        "4: hidden_size: expected a valid integer, got str 'three'",
    ]
    assert "more" not in got


def test_unknown_adapter_names_are_each_named(tmp_path: Path, capsys):
    case = tmp_path / "names.yaml"
    case.write_text(THREE.replace("input_size: 0", "input_size: 2")
                    .replace("hidden_size: three", "hidden_size: 3")
                    .replace("sed:", "seed:")
                    + "adapters: [torch-cpuu, reference]\nexclude: [onnxrunime]\n")
    got = _error_line(capsys, str(case), "--out", str(tmp_path / "r"))
    assert got.startswith(f"{case}:8: adapters.0: unknown adapter 'torch-cpuu'; did you mean "
                          "'torch-cpu'? (known: all, "), got
    assert f"; {case}:9: exclude.0: unknown adapter 'onnxrunime'; did you mean 'onnxruntime'? " \
        in got


def test_past_the_limit_the_rest_are_counted(tmp_path: Path, capsys):
    limit = case_validation.MAX_MISTAKES_NAMED
    wrong = limit + 3
    case = tmp_path / "many.yaml"
    case.write_text("name: many\ncell: lstm\ninput_size: 2\nhidden_size: 3\n"
                    + "".join(f"zzz{k}: 1\n" for k in range(wrong)))
    got = _error_line(capsys, str(case), "--out", str(tmp_path / "r"))
    named = [f"{case}:{5 + k}: zzz{k}: unknown key" for k in range(limit)]
    assert got == "; ".join([*named, "3 more not named"])


def test_a_case_built_in_code_names_each_mistake_too():
    with pytest.raises(HarnessError) as err:
        harness.make_case({"cell": "lstm", "input_size": -1, "hidden_size": 3, "batch": 0})
    assert str(err.value) == (
        "case dict: input_size: Input should be greater than or equal to 1, got -1; "
        "case dict: batch: Input should be greater than or equal to 1, got 0")
    # the first mistake is the error's own file, field and line; the others ride with it
    assert (err.value.field, [e.field for e in err.value.also]) == ("input_size", ["batch"])


def test_an_unknown_adapter_a_matrix_varies_is_told_at_the_matrix_key(tmp_path: Path, capsys):
    case = tmp_path / "varied.yaml"
    case.write_text("name: varied-{seed}\ncell: lstm\ninput_size: 2\nhidden_size: 3\nmatrix:\n"
                    "  seed: [1]\n  adapters: [[torch-cpuu]]\n")
    got = _error_line(capsys, str(case), "--out", str(tmp_path / "r"))
    assert got.startswith(f"{case}:7: adapters.0: unknown adapter 'torch-cpuu'; did you mean "
                          "'torch-cpu'? (known: all, "), got
    assert got.endswith(' [matrix: {"seed": 1, "adapters": ["torch-cpuu"]}]'), got
