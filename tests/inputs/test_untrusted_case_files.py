"""Case files and folders from strangers (issue 31): discovery follows no link out of the folder,
an error quotes nothing of a file that is not a case file, control characters in names are
escaped, a FIFO is refused rather than waited on, init writes through no link: one line with
exit code 2 for every bad input."""

from __future__ import annotations

import os

import pytest
from support.bad_input import GOOD
from support.bad_input import one_line_without_secret as one_line
from support.bad_input import plant_secret as _secret
from support.cli import cli

from harness.cases import discover, load_cases
from harness.errors import CaseError

# 3, 15. Case discovery -------------------------------------------------------------------------

def test_discovery_does_not_follow_links_out_of_the_folder(tmp_path, capsys):
    secret = _secret(tmp_path)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a.yaml").write_text(GOOD)
    (tmp_path / "outside" / "b.yaml").write_text(GOOD.replace("good", "outside"))
    (cases / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    (cases / "data").mkdir()
    (cases / "data" / "inner.txt").write_text(GOOD.replace("good", "inner"))
    (cases / "inner.yaml").symlink_to(cases / "data" / "inner.txt")  # inside the folder: read
    # the linked folder is not entered
    assert [c.name for c in discover([cases])] == ["good", "inner"]
    (cases / "creds.yaml").symlink_to(secret)
    code, err = cli(["run", str(cases), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "creds.yaml: is a link to a file outside", "not followed")


SHADOW = "root:*:20228:0:99999:7:::\nTOPSECRET:$6$abc$def:20228:0:99999:7:::\n"  # /etc/shadow


def test_a_case_file_linked_to_a_file_outside_quotes_nothing_of_it(tmp_path, capsys):
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text(SHADOW)
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "x.yaml").symlink_to(outside / "shadow")  # named: read
    code, err = cli(["run", str(tmp_path / "cases" / "x.yaml"), "--out", str(tmp_path / "r")],
                    capsys)
    line = one_line(code, err, "x.yaml: not a valid case file; it is a link to a file outside")
    assert "root:" not in line and "20228" not in line, line
    # the same text in a file of its own: the keys that are no key's form are not quoted either
    (tmp_path / "y.yaml").write_text(SHADOW)
    code, err = cli(["run", str(tmp_path / "y.yaml"), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, "y.yaml:1: ?: unknown key")
    assert "root:" not in line and "20228" not in line, line


@pytest.mark.parametrize("text", [
    "a: !TOPSECRET x\n",  # a tag, which PyYAML quotes
    "a: 'TOPSECRET\n",  # an unclosed quote
    "- TOPSECRET\n\ta: TOPSECRET\n",
])
def test_an_invalid_yaml_error_quotes_nothing_of_the_file(text, tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(text)
    code, err = cli(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "c.yaml:", "invalid YAML")


@pytest.mark.parametrize("text", [
    "[default]\naws_access_key_id = AKIA{s}\naws_secret_access_key = {s}\n",  # ~/.aws
    "machine example.org login me password {s}\n",  # ~/.netrc
    "SECRET_KEY={s}\nTOKEN: '{s}\n",  # .env
    "-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n-----END OPENSSH PRIVATE KEY-----\n",
    "user: me\npassword: {s}\n",  # YAML-like: the keys only
])
def test_a_yaml_error_does_not_quote_a_line_that_is_not_yaml(text, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(text.format(s="TOPSECRET" + "x" * 80))
    code, err = cli(["run", str(case), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, str(case))
    assert "x" * 60 not in line, line


def test_control_characters_in_file_names_are_escaped(tmp_path, capsys):
    case = tmp_path / "evil\x1b[2J\x1b]0;title\x07.yaml"
    case.write_text("cell: [\n")
    code, err = cli(["run", str(case), "--out", str(tmp_path / "r")], capsys)
    line = one_line(code, err, "evil\\x1b[2J\\x1b]0;title\\x07.yaml")
    assert "\x1b" not in line and "\x07" not in line


def test_a_fifo_as_a_case_or_weights_path_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "case.yaml"
    os.mkfifo(fifo)
    code, err = cli(["run", str(fifo), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "case.yaml: not a regular file")
    with pytest.raises(CaseError, match="not a regular file"):
        load_cases(fifo)
    wfifo = tmp_path / "w.pt"
    os.mkfifo(wfifo)
    code, err = cli(["convert", str(wfifo), str(tmp_path / "o.pt")], capsys)
    one_line(code, err, "w.pt: not a regular file")
    npz = tmp_path / "w.npz"
    os.mkfifo(npz)
    (tmp_path / "c.yaml").write_text(GOOD + "weights: {file: w.npz, layout: torch}\n")
    code, err = cli(["run", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")], capsys)
    one_line(code, err, "w.npz: weights file is not a regular file")


# 5. init ------------------------------------------------------------------------------------

@pytest.mark.parametrize("plant", ["dangling-link", "linked-subfolder"])
def test_init_never_writes_through_links(plant, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    d = tmp_path / "d"
    d.mkdir()
    if plant == "dangling-link":
        (d / "float64.yaml").symlink_to(outside / "planted.yaml")
    else:
        (d / "gradients").symlink_to(outside, target_is_directory=True)
    code, err = cli(["init", str(d)], capsys)
    one_line(code, err, "is a symbolic link")
    assert list(outside.iterdir()) == []


# 16. Options ------------------------------------------------------------------------------------

@pytest.mark.parametrize("budget", ["-1", "nan", "0", "inf"])
def test_doctor_budget_must_be_a_positive_time(budget, tmp_path, capsys):
    code, err = cli(["doctor", "--case", str(tmp_path / "c.yaml"), "--weights",
                     str(tmp_path / "w.npz"), "--layout", "torch", "--adapter", "torch-cpu",
                     "--budget", budget], capsys)
    one_line(code, err, "--budget: expected a finite number of seconds > 0")
