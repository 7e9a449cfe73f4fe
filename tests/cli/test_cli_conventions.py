"""What a new user meets: --version, --help, "did you mean", --format json, run --atol/--rtol,
the bundled cases run from anywhere and copied out by ``init``, the declared dependency bounds
(pyproject.toml, constraints/minimum.txt and the adapters' version check agree), the schema's
descriptions, and no TensorFlow C++ start-up line on the terminal."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from harness import __version__
from harness.adapters import ADAPTERS
from harness.adapters.base import MINIMUM_VERSIONS
from harness.cli import main
from harness.layouts import LAYOUTS
from harness.spec import json_schema

ROOT = Path(__file__).resolve().parents[2]
CASE = """\
name: tiny
cell: lstm
input_size: 3
hidden_size: 4
batch: 2
seq_len: 4
"""


@pytest.fixture
def case_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(CASE)
    return path


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"rnn-harness {__version__}"


def test_help_lists_adapters_layouts_devices_and_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in [*ADAPTERS, *LAYOUTS]:
        assert re.search(rf"(^|[\s,]){re.escape(name)}([\s,\[]|$)", out), name
    assert "devices (--device):" in out and "cpu, gpu, all" in out
    codes = out.split("exit codes:")[1]
    for code in ("0:", "1:", "2:"):
        assert code in codes


@pytest.mark.parametrize("argv, wanted", [
    (["run", "--adapters", "torch-cpo"], "did you mean 'torch-cpu'"),
    (["layouts", "--layout", "kers"], "did you mean 'keras'"),
    (["probe", "--adapter", "onnxruntim"], "did you mean 'onnxruntime'"),
])
def test_did_you_mean(argv, wanted, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert wanted in err and err.count("\n") == 1


def test_every_unknown_adapter_is_named_with_its_did_you_mean(capsys):
    assert main(["run", "--adapters", "torch_cpu,onnx,reference,zzz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert ("unknown adapters 'torch_cpu' (did you mean 'torch-cpu' or 'torch-cudnn' or "
            "'torch-compile'?), 'onnx' "
            "(did you mean 'onnxruntime' or 'onnxruntime-dynamic-int8' or "
            "'onnxruntime-dynamic-int8-full-range'?), 'zzz'; known: ") in err, err


def test_adapters_format_json(capsys):
    assert main(["adapters", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == list(ADAPTERS)
    assert data["reference"]["available"] is True


def _run(cases: list[str], out: Path, *extra: str) -> int:
    return main(["run", *cases, "--adapters", "noise-floor", "--out", str(out), "--quiet",
                 "--plots", "none", *extra])


def test_run_atol_rtol_replace_every_tolerance(case_file, tmp_path, capsys):
    # noise-floor: the reference rounded to float32, a few ulp from the float64 one
    assert _run([str(case_file)], tmp_path / "zero", "--atol", "0", "--rtol", "0") == 1
    assert _run([str(case_file)], tmp_path / "loose", "--atol", "1e-3", "--rtol", "0") == 0
    # so loose that no plausible mistake could fail (|y| < 1): a vacuous case, exit 1
    assert _run([str(case_file)], tmp_path / "vacuous", "--atol", "1", "--rtol", "0") == 1
    assert _run([str(case_file)], tmp_path / "bad", "--atol", "-1") == 2
    run = json.loads((tmp_path / "zero" / "run.json").read_text())
    assert [p["status"] for p in run["pairs"] if p["adapter"] == "noise-floor"] == ["DIVERGED"]


def test_final_line_gives_the_whole_commands_time(case_file, tmp_path, capsys):
    # the noise floor alone tests no framework: vacuous, exit 1
    assert _run([str(case_file)], tmp_path / "r") == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.search(r"\(pairs \d+\.\d s; (\d+\.\d) s in all\)$", last), last


def test_diff_format_json(case_file, tmp_path, capsys):
    _run([str(case_file)], tmp_path / "a")
    _run([str(case_file)], tmp_path / "b")
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regression"] is False and data["new_bad"] == []


@pytest.mark.torch
def test_doctor_format_json(case_file, tmp_path, capsys):
    pytest.importorskip("torch")
    from harness import params
    from harness.cases import load_cases
    from harness.layouts import get_layout
    from harness.npz import save_npz

    case = load_cases(case_file)[0]
    native = get_layout("torch").to_native(params.generate(case), case)
    save_npz(tmp_path / "w.npz", native)
    code = main(["doctor", "--case", str(case_file), "--weights", str(tmp_path / "w.npz"),
                 "--layout", "torch", "--adapter", "torch-cpu", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    # torch weights claimed as torch, torch itself the truth: nothing to fix
    assert code == 0 and data["case"] == "tiny" and data["claimed_layout"] == "torch"
    assert data["claim"]["ok"] is True and data["found"][0]["mistakes"] == []
    assert len(data["claim"]["y_max_abs_per_step"][0]) == 4  # T steps, one direction


def test_run_without_cases_runs_the_bundled_ones_from_anywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no cases/ here
    assert main(["run", "--adapters", "reference", "--out", "r", "--quiet", "--plots",
                 "none"]) == 1  # the reference alone compares nothing: exit 1
    bundled = sorted(p.stem for p in (ROOT / "cases").rglob("*.yaml"))
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert len(run["pairs"]) >= len(bundled)
    # --builtin names the same cases (one shard of them is enough to see which; a shard's
    # exit does not judge what the other shards compare)
    assert main(["run", "--builtin", "--adapters", "reference", "--shard", "1/8", "--out", "r2",
                 "--quiet", "--plots", "none"]) == 0
    some = json.loads((tmp_path / "r2" / "run.json").read_text())["pairs"]
    assert some and {p["case"] for p in some} <= {p["case"] for p in run["pairs"]}


def test_init_copies_the_bundled_cases_and_never_overwrites(tmp_path, capsys):
    assert main(["init", str(tmp_path / "mine")]) == 0
    bundled = sorted(p.relative_to(ROOT / "cases") for p in (ROOT / "cases").rglob("*.yaml"))
    copied = sorted(p.relative_to(tmp_path / "mine") for p in (tmp_path / "mine").rglob("*.yaml"))
    assert copied == bundled
    assert main(["init", str(tmp_path / "mine")]) == 2
    assert "exist already" in capsys.readouterr().err


def test_init_refuses_an_empty_folder_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # '' would be this folder
    for empty in ("", "  "):
        assert main(["init", empty]) == 2
        assert "DIR: expected a folder name, got an empty one" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_schema_property_is_described():
    schema = json_schema()
    missing = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, prop in node.get("properties", {}).items():
                if "description" not in prop:
                    missing.append(f"{path}{key}")
            for key, value in node.items():
                walk(value, f"{path}{key}." if key not in ("properties", "$defs") else path)
        elif isinstance(node, list):
            for value in node:
                walk(value, path)

    walk(schema, "")
    assert len(schema["properties"]) >= 30
    assert not missing, missing


# Dependency bounds -------------------------------------------------------------------------

def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _lower_bounds() -> dict[str, str]:
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for items in project["optional-dependencies"].values():
        reqs += [r for r in items if not r.startswith("rnn-harness")]
    bounds = {}
    for r in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", r)
        assert m, f"{r}: every dependency declares a lower bound"
        bounds[m[1].lower().replace("-", "_")] = m[2]
    return bounds


def _release(v: str) -> tuple[int, ...]:
    parts = tuple(int(n) for n in v.split("."))
    return parts + (0,) * (3 - len(parts))


def test_constraints_pin_every_declared_lower_bound():
    pins = {}
    for line in (ROOT / "constraints" / "minimum.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("-", "_")] = version
    bounds = _lower_bounds()
    bounds.pop("cupy_cuda13x")  # GPU only: not in the CPU minimum environment
    bounds.pop("cupy_cuda12x")
    bounds.pop("ruff")  # the lint environment's, not the tests'
    # not in the minimum environment (tox.ini says why): the test environment installs exactly
    # these lower bounds
    for dist in ("litert_torch", "executorch"):
        assert _release(bounds.pop(dist)) == _release(metadata.version(dist)), dist
    assert set(pins) == set(bounds)
    assert {k: _release(v) for k, v in pins.items()} == {k: _release(v) for k, v in
                                                          bounds.items()}


def test_adapters_version_check_uses_the_declared_bounds():
    bounds = _lower_bounds()
    for dist, minimum in MINIMUM_VERSIONS.items():
        assert _release(bounds[dist]) == _release(minimum), dist


def test_every_package_and_the_bundled_cases_are_packaged():
    tool = _pyproject()["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "harness").rglob(
        "__init__.py")}
    assert found <= set(tool["packages"])
    assert tool["package-dir"] == {"harness._cases": "cases"}
    folders = {"harness._cases" + "".join(f".{part}" for part in p.relative_to(
        ROOT / "cases").parts) for p in (ROOT / "cases").rglob("*") if p.is_dir()}
    assert folders | {"harness._cases"} <= set(tool["packages"])
    assert set(tool["package-data"]) == folders | {"harness._cases", "harness.reference"}
    # and every file of harness/ that is not Python (the fused GPU steps' .cu) is package data
    for f in (ROOT / "harness").rglob("*"):
        if f.is_file() and f.suffix not in (".py", ".pyc"):
            package = ".".join(f.parent.relative_to(ROOT).parts)
            patterns = tool["package-data"].get(package, [])
            assert any(fnmatch.fnmatch(f.name, pat) for pat in patterns), f
    assert _pyproject()["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").is_file()


@pytest.mark.tensorflow
@pytest.mark.nightly  # a TensorFlow process of its own
def test_no_tensorflow_cxx_startup_line_reaches_the_terminal():
    pytest.importorskip("tensorflow")
    code = ("import sys; from harness.frameworks.tf import import_tf; tf = import_tf(); "
            "tf.constant(1.0) + 1; print('done', file=sys.stderr)")
    # the user's own TF_CPP_MIN_LOG_LEVEL=0 would let every C++ line through
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "done\n"


# an absl/glog-format native log line: "E0000 00:00:1795783824.434151   27209 util.cc:131] ..."
NATIVE_LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:. ]+\d+ [\w.-]+:\d+\] ", re.M)


@pytest.mark.tensorflow
@pytest.mark.nightly  # three TensorFlow processes (two workers, then in-process)
def test_no_tensorflow_native_log_line_during_a_run_while_the_rest_of_stderr_stays(tmp_path):
    """A keras and tf-legacy run, in worker processes (--jobs 2) and then in-process, with the
    user's TF_CPP_MIN_LOG_LEVEL=0 (every C++ line through): TensorFlow's native lines (the
    oneDNN DT_BOOL ERROR line comes at the first graph run, after the import) never reach fd 2,
    while the harness's progress, a Python warning and a faulthandler traceback still do."""
    pytest.importorskip("tensorflow")
    code = f"""if True:
        import faulthandler, sys, warnings
        from harness.cli import main
        args = ["run", "cases/reverse.yaml", "--adapters", "keras,tf-legacy", "--plots", "none",
                "--verbose"]
        codes = [main([*args, "--jobs", "2", "--out", {str(tmp_path / "jobs")!r}]),
                 main([*args, "--out", {str(tmp_path / "here")!r}])]
        warnings.warn("planted Python warning")
        faulthandler.dump_traceback(all_threads=False)
        sys.exit(max(codes))
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not NATIVE_LOG_LINE.search(proc.stderr), proc.stderr
    assert proc.stderr.count("reverse-lstm::keras  pass") == 2, proc.stderr  # progress, twice
    assert "UserWarning: planted Python warning" in proc.stderr
    assert 'Stack (most recent call first):\n  File "<string>"' in proc.stderr  # faulthandler


def test_native_log_line_pattern_matches_tensorflows_format():
    line = ("E0000 00:00:1795783824.434151   27209 util.cc:131] oneDNN supports DT_BOOL only on "
            "platforms with AVX-512. Falling back to the default Eigen-based implementation.")
    assert NATIVE_LOG_LINE.search("progress\n" + line)
    assert not NATIVE_LOG_LINE.search("[1/4] reverse-lstm::keras  pass  max_abs 4.45e-08")


def test_noise_floor_really_differs_from_the_reference():
    # the premise of test_run_atol_rtol_replace_every_tolerance, checked without the harness
    x = np.float64(1.0) / 3
    assert np.float64(np.float32(x)) != x
