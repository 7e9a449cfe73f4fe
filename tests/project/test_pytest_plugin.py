"""The pytest plugin (harness/pytest_plugin/) as a user meets it: pytest run on a folder of
case files outside the checkout, the printed node ids passed back, JUnit properties, a planted
divergence; and inside this repository, the plugin registered once whether or not the package's
entry point is installed.

Each pytest runs in a subprocess on this checkout's package (PYTHONPATH), with ``-p
harness.pytest_plugin`` only where no installed entry point provides the plugin (naming it
twice would stop pytest)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness import pytest_plugin

ROOT = Path(__file__).resolve().parents[2]

TINY = """\
name: tiny
input_size: 2
hidden_size: 3
batch: 2
seq_len: 4
seed: 3
matrix:
  cell: [lstm, gru]
"""
# torch-cpu held to 1e-12: float32 arithmetic against the float64 reference diverges at once
STRICT = """\
name: strict
cell: lstm
input_size: 2
hidden_size: 3
batch: 2
seq_len: 4
seed: 3
tolerance:
  adapters:
    torch-cpu: {atol: 1.0e-12, rtol: 0}
"""
WORKFLOW = """\
on: [push]
jobs:
  test: {runs-on: ubuntu-latest, steps: [{run: pytest}]}
"""


def _installed() -> bool:
    return any(ep.name == pytest_plugin.PLUGIN_NAME
               for ep in importlib.metadata.entry_points(group="pytest11"))


def _pytest(*args: str, cwd: Path, pythonpath: list[Path] | None = None,
            plugin: bool = True) -> subprocess.CompletedProcess:
    """``python -m pytest args`` in ``cwd`` on this checkout's package; ``plugin``: load the
    plugin by ``-p`` where no installed entry point does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(map(str, [ROOT, *(pythonpath or [])]))
    env.pop("PYTEST_ADDOPTS", None)
    extra = ["-p", "harness.pytest_plugin"] if plugin and not _installed() else []
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *extra,
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _ids(out: str) -> list[str]:
    return [line for line in out.splitlines() if "::" in line and " " not in line]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A user's case folder outside the checkout: a matrix case, a case in a subfolder, a CI
    workflow (YAML, not a case) and a case file that is broken as YAML."""
    work = tmp_path / "mine"
    (work / "sub").mkdir(parents=True)
    (work / "tiny.yaml").write_text(TINY)
    (work / "sub" / "strict.yaml").write_text(STRICT)
    (work / "ci.yml").write_text(WORKFLOW)
    (work / "broken.yaml").write_text("cell: lstm\nname: [broken\n")
    assert not work.is_relative_to(ROOT)
    return work


def test_a_folder_outside_the_checkout_is_collected_case_by_adapter(folder: Path) -> None:
    got = _pytest(".", "--collect-only", "-q", "--rnn-adapters", "reference,noise-floor,torch-cpu",
                  cwd=folder)
    assert got.returncode == 0, got.stdout + got.stderr
    assert sorted(_ids(got.stdout)) == sorted([
        "broken.yaml::load",  # a case file that cannot be loaded: one failing item
        "sub/strict.yaml::strict::noise-floor", "sub/strict.yaml::strict::torch-cpu",
        "tiny.yaml::tiny-lstm::noise-floor", "tiny.yaml::tiny-lstm::torch-cpu",
        "tiny.yaml::tiny-gru::noise-floor", "tiny.yaml::tiny-gru::torch-cpu",
    ])  # the workflow is not a case (named, it is: see below); the reference is the baseline


def test_a_printed_node_id_reruns_exactly_that_item(folder: Path) -> None:
    """The id as --collect-only prints it, passed back: one item runs, and its JUnit
    properties carry the verdict and the worst error."""
    pytest.importorskip("torch")
    node = "tiny.yaml::tiny-gru::torch-cpu"
    xml = folder / "junit.xml"
    got = _pytest(node, "-q", "-rA", f"--junitxml={xml}", cwd=folder)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "1 passed" in got.stdout and f"PASSED {node}" in got.stdout, got.stdout
    (case,) = ET.parse(xml).getroot().iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("tiny.yaml.tiny-gru", "torch-cpu")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["case"] == "tiny-gru" and props["adapter"] == "torch-cpu"
    assert props["verdict"] == "pass"
    assert 0 < float(props["max_abs"]) and 0 < float(props["tol_ratio"]) <= 1
    assert "first_diverging" not in props


def test_a_divergence_fails_with_its_first_diverging_step(folder: Path) -> None:
    """A planted divergence (torch-cpu held to 1e-12) fails with the harness's message, not a
    traceback, and the JUnit properties name the first diverging step part by part; declared as
    a known upstream bug it is an xfail, and a declared bug that does not show fails (looks
    fixed); the broken file's item fails with its file and line, and so does a YAML file that
    is not a case when it is named on the command line."""
    pytest.importorskip("torch")
    expected = "expected:\n  torch-cpu: {verdict: DIVERGED, upstream: example/example#1}\n"
    (folder / "sub" / "known.yaml").write_text(STRICT.replace("strict", "known") + expected)
    (folder / "sub" / "fixed.yaml").write_text(
        STRICT.replace("strict", "fixed").split("tolerance:")[0] + expected)
    xml = folder / "junit.xml"
    got = _pytest("sub", "broken.yaml", "ci.yml", "-q", "-rfx", "--rnn-adapters", "torch-cpu",
                  f"--junitxml={xml}", cwd=folder)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "4 failed, 1 xfailed" in got.stdout
    assert "FAILED ci.yml::load - case file cannot be loaded" in got.stdout
    assert "XFAIL sub/known.yaml::known::torch-cpu - known upstream bug example/example#1" \
        in got.stdout
    assert "FAILED sub/fixed.yaml::fixed::torch-cpu - fixed::torch-cpu: looks fixed" \
        in got.stdout
    assert "strict::torch-cpu: DIVERGED: first at y L0 d0 t=0: max_abs" in got.stdout
    assert "Traceback" not in got.stdout
    assert f"{folder / 'broken.yaml'}:3: invalid YAML" in got.stdout
    cases = {f"{c.get('classname')}.{c.get('name')}": c
             for c in ET.parse(xml).getroot().iter("testcase")}  # sub/x.yaml::c::a: sub.x.yaml.c.a
    props = {p.get("name"): p.get("value")
             for p in cases["sub.strict.yaml.strict.torch-cpu"].iter("property")}
    assert props["verdict"] == "DIVERGED" and float(props["tol_ratio"]) > 1
    assert props["first_diverging"] == "y L0 d0 t=0"
    assert [props[f"first_diverging_{k}"] for k in ("output", "layer", "direction", "t")] == \
        ["y", "0", "0", "0"]
    error = {p.get("name"): p.get("value") for p in cases["broken.yaml.load"].iter("property")}
    assert "broken.yaml:3: invalid YAML" in error["error"]


def _fake_install(site: Path) -> None:
    """The package's pytest11 entry point, as pyproject.toml declares it, in a dist-info
    folder of ``site`` (what an install writes)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    dist = site / "rnn_harness_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rnn-harness-entry-point\n"
                                   "Version: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared["pytest11"].items()))


def test_in_this_repository_the_plugin_is_registered_once(tmp_path: Path) -> None:
    """With the entry point installed, the root conftest leaves the plugin to it: the bundled
    cases are collected once, the short option names work, and nothing is registered twice."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["pytest11"] == {pytest_plugin.PLUGIN_NAME: "harness.pytest_plugin"}
    site = tmp_path / "site"
    if not _installed():
        _fake_install(site)
    got = _pytest("cases/reverse.yaml", "--collect-only", "-q", "--trace-config",
                  "--adapters", "noise-floor", "--device", "cpu", cwd=ROOT, pythonpath=[site],
                  plugin=False)
    assert got.returncode == 0, got.stdout + got.stderr
    assert _ids(got.stdout) == ["cases/reverse.yaml::reverse-lstm::noise-floor",
                                "cases/reverse.yaml::reverse-gru::noise-floor"]
    registered = [line for line in (got.stdout + got.stderr).splitlines()
                  if line.startswith("PLUGIN registered: <module 'harness.pytest_plugin'")]
    assert len(registered) == 1, got.stdout + got.stderr


def test_every_framework_has_its_marker() -> None:
    from harness.adapters import ADAPTERS

    assert {a.framework for a in ADAPTERS.values()} <= set(pytest_plugin.FRAMEWORK_MARKERS)


@pytest.mark.parametrize(("text", "case"), [
    (TINY, True), (STRICT, True), ("\ufeffcell: gru\n", True), ('"matrix": {cell: [lstm]}\n', True),
    ("cell: lstm\nname: [broken\n", True), ("---\ncell: lstm\n", True),
    ("# a case as a flow mapping\n{name: f, cell: gru,\n input_size: 2}\n", True),
    ('{"cell": "lstm"}', True),
    (WORKFLOW, False), ("steps:\n  cell: lstm\n", False), ("# cell: lstm\n", False),
    ("cells: 3\n", False), ("envlist: py\n", False), ("{on: push, jobs: {cell: 1}}", False),
    ("[{cell: lstm}]", False), ("{cell: [broken", False),
])
def test_what_reads_as_a_case_file(tmp_path: Path, text: str, case: bool) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    assert pytest_plugin.is_case_file(path) is case
    assert not pytest_plugin.is_case_file(path.rename(tmp_path / "f.txt"))


def _pair_outcome(monkeypatch: pytest.MonkeyPatch, status: str) -> None:
    """Run :meth:`PairItem.runtest` on a pair whose run gave ``status`` (run_pair planted: no
    case is prepared, no adapter run)."""
    from types import SimpleNamespace

    from harness import pairs
    from harness.pytest_plugin.items import PairItem

    result = SimpleNamespace(status=status, reason="planted", detail="", seconds=0.0,
                             worst=None, first_diverging=None)
    monkeypatch.setattr(pairs, "run_pair", lambda prepared, adapter: result)
    item = SimpleNamespace(
        parent=SimpleNamespace(prepared=lambda: None, blind_check=lambda adapter: None),
        adapter=SimpleNamespace(device="cpu", name="planted"), user_properties=[],
        config=SimpleNamespace(getoption=lambda name: False))
    PairItem.runtest(item)  # type: ignore[arg-type]


def test_a_pair_passes_only_as_pass_and_fails_on_a_status_the_plugin_does_not_know(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import compare
    from harness.pytest_plugin.items import ConformanceFailure

    _pair_outcome(monkeypatch, compare.PASS)
    for status in ("a status added later", compare.BASELINE, compare.NOT_SELECTED):
        with pytest.raises(ConformanceFailure, match="the plugin does not know it"):
            _pair_outcome(monkeypatch, status)
