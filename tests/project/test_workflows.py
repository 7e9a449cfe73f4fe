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
