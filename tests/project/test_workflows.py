"""The CI workflows: a report folder uploaded as an artifact keeps its hidden marker
(``.rnn-harness-report``, :data:`harness.report.folder.MARKER`), which actions/upload-artifact
v4 leaves out unless told; without it the downloaded folder is not recognised as a report that
``--out`` may replace."""

from __future__ import annotations

from pathlib import Path

import yaml

WORKFLOWS = Path(__file__).parents[2] / ".github" / "workflows"


def _uploads() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for job in doc.get("jobs", {}).values():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("actions/upload-artifact"):
                    found.append((f"{path.name}: {step.get('name', '')}", step.get("with", {})))
    return found


def test_report_folder_uploads_keep_the_hidden_marker():
    folders = [(where, w) for where, w in _uploads() if not Path(str(w["path"])).suffix]
    assert folders, "no report folder is uploaded: the workflow changed, update this test"
    missing = [where for where, w in folders if w.get("include-hidden-files") is not True]
    assert missing == []


def test_the_nightly_names_every_adapter_left_out_of_the_default_selection():
    """An adapter that runs only when named (Adapter.named_only) is run by the nightly, where
    its cost is paid once: the workflow names each CPU one, or runs a case folder whose cases
    name it in their ``adapters:``."""
    from harness.adapters import ADAPTERS
    from harness.cases import load_cases

    text = (WORKFLOWS / "nightly.yml").read_text(encoding="utf-8")
    root = WORKFLOWS.parents[1]
    named = {n for folder in root.glob("cases*") if f"run {folder.name}" in text
             for f in folder.rglob("*.yaml") for c in load_cases(f) for n in c.adapters}
    missing = [a.name for a in ADAPTERS.values() if a.named_only is not None
               and a.device == "cpu" and a.name not in text and a.name not in named
               and not _runs_a_shipped_file_in_the_tests(a)]
    assert missing == [], f"named-only adapters the nightly never runs: {missing}"


def _runs_a_shipped_file_in_the_tests(adapter) -> bool:  # noqa: ANN001
    """An adapter that runs a case's ``shipped:`` file (its own ``asked_for``) has no bundled
    case to run, since no model file is checked in: the tests that build such files with the
    frameworks run it instead (the nightly runs the ``roads`` ones)."""
    from harness.adapters.base import Adapter

    if type(adapter).asked_for is Adapter.asked_for:
        return False
    tests = WORKFLOWS.parents[1] / "tests"
    return any(f'"{adapter.name}"' in f.read_text(encoding="utf-8")
               for f in tests.rglob("test_*.py"))


def test_the_nightly_runs_tox_latest_with_nothing_pinned():
    """``tox -e latest``: the newest release of every framework, run by the nightly (a step's
    command, not a comment), with no pin of torch or anything else left from ``[testenv]``."""
    import configparser

    steps = [str(step.get("run", "")) for job in
             yaml.safe_load((WORKFLOWS / "nightly.yml").read_text(encoding="utf-8"))["jobs"]
             .values() for step in job.get("steps", [])]
    assert [s for s in steps if "tox -e latest" in s], "the nightly does not run tox -e latest"
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(WORKFLOWS.parents[1] / "tox.ini", encoding="utf-8")
    latest = tox["testenv:latest"]
    assert latest["deps"].strip() == ""  # [testenv]'s torch pin replaced by nothing
    assert "--upgrade --upgrade-strategy eager" in latest["install_command"]
    assert " -c " not in latest["install_command"]  # no constraints file
    commands = latest["commands"]
    assert "pytest" in commands and "harness run cases --device cpu" in commands
