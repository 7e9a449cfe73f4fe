"""The ``adapters`` command: the table of adapters and capabilities, including the case features
an adapter's backward pass is not compared for (``Capabilities.gradient_reasons``)."""

from __future__ import annotations

import json

from harness.adapters import ADAPTERS, Capabilities
from harness.cli import main
from harness.cli.adapters import _features


def table_rows(out: str) -> dict[str, list[str]]:
    """adapter name -> its cells, from the github-format table in the command's output."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| adapter "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells
    return rows


def test_adapters_table_shows_gradient_exclusions(capsys):
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert list(rows) == list(ADAPTERS)
    # tf-block's BlockLSTMGrad ignores cell_clip: gradients, but not with cell_clip
    assert rows["tf-block"][-1] == ("peepholes,cell_clip,variable_lengths,"
                                    "gradients (not with cell_clip)")
    assert rows["tf-block-v2"][-1].endswith(",gradients (not with cell_clip)")
    # no exclusions: plain "gradients"; no backward pass: not listed
    assert rows["torch-cpu"][-1] == "projection,variable_lengths,gradients"
    assert "gradients" not in rows["onnxruntime"][-1]
    # the note under the table says why
    note = out.split("Gradients not compared (forward only) for cases with these features:\n")[1]
    note, _, named_only = note.partition("\n\n")  # then the adapters run when named
    assert "  torch-compile: run when named: " in named_only
    assert note.splitlines() == [
        "  tf-block with cell_clip: TF BlockLSTMGrad has no cell_clip and differentiates the "
        "clip as the identity",
        "  tf-block-v2 with cell_clip: TF BlockLSTMGradV2 has no cell_clip and differentiates "
        "the clip as the identity",
    ]


def test_adapters_json_keeps_gradient_exclusions(capsys):
    assert main(["adapters", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tf-block"]["capabilities"]["gradients"] == "yes, except with cell_clip"
    assert doc["torch-cpu"]["capabilities"]["gradients"] == "yes"


def test_features_lists_several_exclusions_sorted():
    caps = Capabilities(peepholes=True, gradients=True,
                        gradient_reasons={"gate_clip": "why", "cell_clip": "why"})
    assert _features(caps) == ("peepholes,variable_lengths,"
                               "gradients (not with cell_clip or gate_clip)")
    # reasons without a backward pass at all: no gradients entry
    assert _features(Capabilities(gradient_reasons={"cell_clip": "why"})) == "variable_lengths"


def test_adapter_with_a_too_old_framework_is_unavailable_with_the_version_needed(monkeypatch,
                                                                              capsys):
    import importlib.metadata

    from harness.adapters.base import MINIMUM_VERSIONS

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda d: "1.18.1" if d == "onnxruntime" else real(d))
    adapter = ADAPTERS["onnxruntime"]
    monkeypatch.setattr(adapter, "_availability", False)  # not the cached answer
    assert main(["adapters", "--format", "json"]) == 0
    entry = json.loads(capsys.readouterr().out)["onnxruntime"]
    assert entry["available"] is False
    assert entry["reason"] == (f"needs onnxruntime>={MINIMUM_VERSIONS['onnxruntime']}, "
                               "found 1.18.1")
