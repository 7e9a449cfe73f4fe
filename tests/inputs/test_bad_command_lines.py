"""Bad command lines are exit code 2 and one line before anything runs: options out of range,
duplicate adapter names, output paths that cannot be written, crafted report folders given to
diff and merge; a run that compares nothing exits 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.bad_input import GOOD, run_cli

from harness.cli import main


@pytest.mark.parametrize("args, words", [
    (["--timeout", "-1"], "--timeout: expected seconds >= 0"),
    (["--timeout", "nan"], "--timeout: expected seconds >= 0"),
    (["--max-memory", "lots"], "--max-memory: expected a size like 4GiB"),
    (["--max-memory", "0"], "--max-memory: expected a positive size"),
])
def test_bad_options_exit_2(args, words, tmp_path, capsys):
    case = tmp_path / "c.yaml"
    case.write_text(GOOD)
    code, err, _ = run_cli([str(case), "--out", str(tmp_path / "r"), *args], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_max_memory_must_be_finite(tmp_path, capsys):
    code, err, _ = run_cli([str(_case(tmp_path)), "--out", str(tmp_path / "r"),
                            "--max-memory", "1e999"], capsys)
    assert code == 2 and len(err) == 1 and "--max-memory" in err[0], err


# Nothing green that tested nothing --------------------------------------------------------------

def _case(tmp_path: Path, extra: str = "") -> Path:
    case = tmp_path / "c.yaml"
    case.write_text(GOOD + extra)
    return case


@pytest.mark.parametrize("args, extra", [
    (["--device", "cpu", "--adapters", "torch-cudnn"], ""),
    (["--adapters", "reference"], ""),
    (["--adapters", "reference,torch-cpu"], "adapters: []\n"),
    (["--adapters", "reference,torch-cpu"], "exclude: [all]\n"),
])
def test_a_run_that_compares_nothing_exits_1(args, extra, tmp_path, capsys):
    code, err, out = run_cli([str(_case(tmp_path, extra)), "--out", str(tmp_path / "r"),
                              "--quiet", *args], capsys)
    assert code == 1, (code, err, out)
    assert len(err) == 1 and "nothing was compared" in err[0], err


def test_exclude_all_excludes_every_adapter(tmp_path, capsys):
    run_cli([str(_case(tmp_path, "exclude: [all]\n")), "--out", str(tmp_path / "r"), "--quiet",
             "--adapters", "reference,torch-cpu"], capsys)
    text = (tmp_path / "r" / "run.json").read_text()
    assert text.count("not selected by the case") == 2


@pytest.mark.parametrize("value", ["torch-cpu,torch-cpu", "reference,,torch-cpu", ""])
def test_duplicate_or_empty_adapter_names_are_refused(value, tmp_path, capsys):
    code, err, _ = run_cli([str(_case(tmp_path)), "--out", str(tmp_path / "r"),
                            "--adapters", value], capsys)
    assert code == 2 and len(err) == 1 and "--adapters" in err[0], err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("option, value", [("--factor", "nan"), ("--factor", "1"),
                                           ("--factor", "inf"), ("--factor", "-3"),
                                           ("--ignore-below", "nan")])
def test_diff_refuses_a_factor_that_cannot_find_a_regression(option, value, tmp_path, capsys):
    code = main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), option, value])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and option in err[0], err


# Report folders that cannot be written: refused before anything runs -----------------------------

def _bad_outs(tmp_path: Path) -> list[str]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o555)
    notreport = tmp_path / "mine"
    notreport.mkdir()
    (notreport / "thesis.tex").write_text("x")
    outs = [str(afile), str(afile / "sub"), "", str(notreport), "/proc/rnn-harness-x",
            "/sys/rnn-harness-x"]
    if os.geteuid() != 0:  # root writes anywhere
        outs.append(str(readonly / "r"))
    return outs


def test_an_output_folder_that_cannot_be_written_is_refused_before_running(tmp_path, capsys):
    case = _case(tmp_path)
    for out in _bad_outs(tmp_path):
        code, err, stdout = run_cli([str(case), "--out", out, "--adapters",
                                     "reference,noise-floor", "--quiet"], capsys)
        assert code == 2 and len(err) == 1 and "--out" in err[0], (out, err)
        assert stdout == "", out
    assert (tmp_path / "mine" / "thesis.tex").exists()


@pytest.mark.parametrize("argv", [
    ["schema", "-o", "{f}/x.json"], ["schema", "-o", "/proc/rnn-harness-x.json"],
    ["merge", "{f}/m", "{r}"], ["merge", "", "{r}"],
    ["diff", "{r}", "{r}", "--out", "{f}/d.md"],
])
def test_writing_into_a_bad_path_is_one_line(argv, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    report = tmp_path / "report"
    # the noise floor alone tests no framework: vacuous, exit 1
    assert main(["run", str(_case(tmp_path)), "--out", str(report), "--quiet", "--adapters",
                 "reference,noise-floor"]) == 1
    capsys.readouterr()
    code = main([a.format(f=afile, r=report) for a in argv])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("rnn-harness: error: "), err



# Crafted report folders for diff and merge -----------------------------------------------------

def _craft(folder: Path, how: str) -> None:
    import json

    run = folder / "run.json"
    doc = json.loads(run.read_text())
    csv = folder / "divergence.csv"
    if how == "run-list":
        run.write_text("[1, 2]")
    elif how == "pair-missing-keys":
        doc["pairs"][0].pop("adapter")
        run.write_text(json.dumps(doc))
    elif how == "shard-abc":
        doc["shard"] = "abc"
        run.write_text(json.dumps(doc))
    elif how == "t-abc":
        lines = csv.read_text().splitlines()
        head = lines[0].split(",")
        cells = lines[1].split(",")
        cells[head.index("t")] = "abc"
        csv.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    elif how == "errors-not-utf8":
        (folder / "errors.log").write_bytes(b"== c::x\n\xff\xfe broken\n")
    elif how == "run-not-utf8":
        run.write_bytes(b"\xff\xfe{}")


@pytest.fixture(scope="module")
def shard_reports(tmp_path_factory):
    base = tmp_path_factory.mktemp("shards")
    case = base / "c.yaml"
    case.write_text(GOOD)
    for k in (1, 2):
        code = main(["run", str(case), "--out", str(base / f"s{k}"), "--quiet", "--adapters",
                     "reference,noise-floor", "--shard", f"{k}/2"])
        assert code in (0, 1)
    return base


@pytest.mark.parametrize("how", ["run-list", "pair-missing-keys", "shard-abc", "t-abc",
                                 "errors-not-utf8", "run-not-utf8"])
def test_crafted_report_folders_are_one_line(how, shard_reports, tmp_path, capsys):
    import shutil

    folders = []
    for k in (1, 2):
        f = tmp_path / f"s{k}"
        shutil.copytree(shard_reports / f"s{k}", f)
        folders.append(f)
    target = folders[0] if "t-abc" != how else next(
        f for f in folders if len((f / "divergence.csv").read_text().splitlines()) > 1)
    _craft(target, how)
    capsys.readouterr()
    for argv in (["merge", str(tmp_path / "m"), *map(str, folders)],
                 ["diff", str(folders[0]), str(folders[1])]):
        code = main(argv)
        err = capsys.readouterr().err.splitlines()
        if how == "errors-not-utf8":  # shown as it is, not fatal
            assert code in (0, 1), (argv[0], err)
            continue
        assert code == 2 and len(err) == 1 and err[0].startswith("rnn-harness: error: "), (
            argv[0], err)
