"""What the pytest plugin collects in a project that merely has rnn-harness installed (issue 53,
items 6 and 7): only YAML that is recognisably a case file, loaded by ``run``'s loader under its
rule for links. A project's own ``.travis.yml`` or config is passed over silently; a case file
that cannot be loaded, or that links outside the folder pytest walks, is one failing
``::load`` item; a YAML file named on the command line is loaded whatever it holds.

Each pytest runs in this process (``pytester``) in a folder of its own; no pair is collected,
so each costs the collection only."""

from __future__ import annotations

import importlib.metadata
import textwrap
from pathlib import Path

import pytest

from harness import pytest_plugin
from harness.cases import discover
from harness.errors import CaseError

pytest_plugins = ["pytester"]

TRAVIS = """\
language: python
matrix:
  include:
    - python: "3.11"
  exclude:
    - python: "3.8"
  fast_finish: true
"""
CONFIG = "cell: 42\nname: spreadsheet\nmatrix: [1, 2]\n"  # a config of another tool
CASE = "name: out\ncell: lstm\ninput_size: 2\nhidden_size: 3\n"
TAGGED = "name: tagged\ncell: gru\ninput_size: !!python/object/apply:os.system [true]\n"


def _pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in ``pytester``'s folder, in this process (the plugin is imported already: a
    subprocess would pay for pytest's and the other installed plugins' start-up again)."""
    installed = any(ep.name == pytest_plugin.PLUGIN_NAME
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    extra = [] if installed else ["-p", "harness.pytest_plugin"]
    # hypothesis's plugin writes its statistics at the end of each session: a second each
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                        *extra, "-rf", *args)


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    """Someone else's project: a test, a Travis file with a top-level matrix, a config with a
    top-level cell."""
    work = pytester.path
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "test_own.py").write_text("def test_own():\n    assert True\n")
    (work / ".travis.yml").write_text(TRAVIS)
    (work / "config.yaml").write_text(CONFIG)
    return work


def test_an_unrelated_project_keeps_its_own_outcome(pytester: pytest.Pytester,
                                                   project: Path) -> None:
    got = _pytest(pytester)
    got.assert_outcomes(passed=1)
    assert got.ret == 0 and "load" not in got.stdout.str()


def test_case_files_that_cannot_run_fail_and_named_yaml_is_loaded(
        pytester: pytest.Pytester, project: Path, tmp_path: Path) -> None:
    """A case file with a ``!!python`` tag and a link to a case file outside the walked folder
    are failing ``::load`` items (the link with ``run``'s very refusal); the config, named on
    the command line, is loaded and its error shown."""
    outside = tmp_path / "outside"
    outside.mkdir()
    assert not outside.is_relative_to(project)
    (outside / "case.yaml").write_text(CASE)
    (project / "tests" / "linked.yaml").symlink_to(outside / "case.yaml")
    (project / "tests" / "tagged.yaml").write_text(TAGGED)
    with pytest.raises(CaseError) as refused:
        discover([project / "tests"])
    # no pair would run even where the link was followed: the baseline is no item
    got = _pytest(pytester, "tests", "config.yaml", "--rnn-adapters", "reference")
    got.assert_outcomes(passed=1, failed=3)
    out = got.stdout.str()
    failed = sorted(line.split(" - ")[0] for line in out.splitlines() if line.startswith("FAILED"))
    assert failed == ["FAILED config.yaml::load", "FAILED tests/linked.yaml::load",
                      "FAILED tests/tagged.yaml::load"], out
    assert f"case file cannot be loaded: {refused.value}" in out, out
    assert "tagged.yaml:3: invalid YAML" in out
    assert "config.yaml:3: matrix: expected a mapping of key -> list of values" in out
    assert "Traceback" not in out


def test_an_unknown_adapter_in_a_case_file_is_its_load_item(pytester: pytest.Pytester,
                                                             project: Path) -> None:
    """The adapter names a case refers to are checked by the plan, not the loader: the
    plugin still makes a wrong one the file's failing ``::load`` item, with run's words."""
    (project / "tests" / "named.yaml").write_text(CASE + "exclude: [onnxrunime]\n")
    got = _pytest(pytester, "tests", "--rnn-adapters", "reference")
    got.assert_outcomes(passed=1, failed=1)
    out = got.stdout.str()
    assert "named.yaml:5: exclude.0: unknown adapter 'onnxrunime'; did you mean 'onnxruntime'?" \
        in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize(("text", "case"), [
    (TRAVIS, False), (CONFIG, False), ("cell: basal\n", False), ("cell:\n  lstm\n", False),
    ("matrix:\n  exclude:\n    - rvm: 2.0\n", False),
    ("matrix:\n  cell: [lstm]\n  os: [a]\n", False),
    ("matrix: {include: [a], cell: [lstm]}\n", False), ("{matrix: {exclude: [[a]]}}", False),
    ('{"cell": 1}', False),
    ("cell: lstm\n", True), ("cell: 'GRU'  # the kind\n", True), ('"cell": "gru"\r\n', True),
    (TAGGED, True), ("cell: lstm\nname: [broken\n", True),
    ("name: m\nmatrix:\n  cell:\n  - lstm\n  - gru\n  # sizes\n  hidden_size: [3]\n", True),
    ("matrix: {cell: [lstm, gru], seed: [0, 1]}  # both\n", True),
    ("{matrix: {cell: [lstm]}, name: f}", True),
])
def test_only_recognisable_case_files_are_collected(tmp_path: Path, text: str,
                                                    case: bool) -> None:
    path = tmp_path / "f.yml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    assert pytest_plugin.is_case_file(path) is case
