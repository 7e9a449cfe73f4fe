"""Case files: validation errors name file, field and line; matrix expansion; schema."""

from __future__ import annotations

import json

import pytest

from harness.cases import discover, load_cases
from harness.cli import main
from harness.errors import CaseError
from harness.spec import json_schema


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_matrix_expands_with_readable_names(tmp_path):
    p = write(tmp_path, "name: m\ncell: gru\ninput_size: 2\nhidden_size: 3\n"
                        "matrix:\n  reset_after: [true, false]\n  dtype: [float32, float16]\n")
    cases = load_cases(p)
    assert [c.name for c in cases] == ["m-reset_after-float32", "m-reset_after-float16",
                                       "m-no_reset_after-float32", "m-no_reset_after-float16"]
    assert [c.reset_after for c in cases] == [True, True, False, False]


def test_matrix_name_template(tmp_path):
    p = write(tmp_path, "name: 'h{hidden_size}'\ncell: lstm\ninput_size: 2\n"
                        "matrix:\n  hidden_size: [1, 2]\n")
    assert [c.name for c in load_cases(p)] == ["h1", "h2"]


@pytest.mark.parametrize("body, field, line, words", [
    ("name: a\ncell: lstm\ninput_size: 2\nhidden_size: 0\n", "hidden_size", 4,
     "greater than or equal to 1"),
    ("name: a\ncell: lsmt\ninput_size: 2\nhidden_size: 3\n", "cell", 2, "'lstm' or 'gru'"),
    ("name: a\ncell: lstm\ninput_size: 2\nhidden_size: 3\nhiden: 4\n", "hiden", 5, "unknown key"),
    ("name: a\ncell: gru\ninput_size: 2\nhidden_size: 3\npeepholes: true\n", None, None,
     "only apply to cell: lstm"),
    ("name: a\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_lengths: [3]\n", None, None,
     "seq_lengths has 1 entries"),
    ("name: a\ncell: lstm\ninput_size: 2\nhidden_size: 3\nmatrix:\n  dtype: [float32, float8]\n",
     "dtype", 6, "float8"),
])
def test_bad_case_names_file_field_line(tmp_path, body, field, line, words):
    p = write(tmp_path, body)
    with pytest.raises(CaseError) as e:
        load_cases(p)
    msg = str(e.value)
    assert str(p) in msg and words in msg, msg
    if field:
        assert e.value.field == field
    if line:
        assert e.value.line == line, msg


def test_yaml_syntax_error_has_line(tmp_path):
    p = write(tmp_path, "name: a\ncell: [lstm\n")
    with pytest.raises(CaseError) as e:
        load_cases(p)
    assert e.value.line is not None and "invalid YAML" in str(e.value)


def test_aliases_refused(tmp_path):
    p = write(tmp_path, "a: &x [1, 2]\nb: *x\n")
    with pytest.raises(CaseError, match="aliases"):
        load_cases(p)


def test_cli_bad_case_exit_2_one_line(tmp_path, capsys):
    p = write(tmp_path, "name: a\ncell: lstm\ninput_size: -1\nhidden_size: 3\n")
    assert main(["run", str(p), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{p}:3: input_size:" in err[0]


def test_duplicate_names_across_files(tmp_path):
    write(tmp_path, "name: a\ncell: lstm\ninput_size: 2\nhidden_size: 3\n", "1.yaml")
    write(tmp_path, "name: a\ncell: gru\ninput_size: 2\nhidden_size: 3\n", "2.yaml")
    with pytest.raises(CaseError, match="already used"):
        discover([tmp_path])


def test_schema_is_json_schema_and_checks_the_bundled_cases():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    from pathlib import Path

    for f in sorted(Path(__file__).parents[2].joinpath("cases").glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(f.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "cell": "lstm", "input_size": 0, "hidden_size": 2},
                            schema)
    assert json.dumps(schema)
