"""The ``adapters`` command: the table of adapters and capabilities, including the case features
an adapter's backward pass is not compared for (``Capabilities.gradient_reasons``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from harness.adapters import ADAPTERS, Capabilities
from harness.cli import main
from harness.cli.adapters import features_column


def table_rows(out: str, second: str = "cells") -> dict[str, list[str]]:
    """adapter name -> its cells, from the github-format table whose header's second column
    is ``second`` (default: the capabilities table), a wrapped cell's lines joined with a
    space."""
    rows: dict[str, list[str]] = {}
    header = re.search(rf"^\| adapter +\| {second} ", out, re.M)
    table = out[header.start():].split("\n\n", 1)[0]
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0]:
            rows[cells[0]] = cells
        else:  # a wrapped row's next line
            last = rows[next(reversed(rows))]
            rows[last[0]] = [f"{a} {b}".strip() for a, b in zip(last, cells, strict=True)]
    return rows


def test_the_table_fits_120_columns_and_imports_no_framework():
    """It answers from the installed packages (a framework import costs seconds each);
    ``--check`` imports them."""
    code = ("import sys; from harness.cli import main; main(['adapters']); "
            "heavy = {'torch', 'tensorflow', 'jax', 'onnxruntime', 'openvino'} & set(sys.modules); "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert max(map(len, done.stdout.splitlines())) <= 120
    assert "openvinotoolkit/openvino#37820 (https://github.com/openvinotoolkit/openvino/issues" \
        in done.stdout


def test_adapters_table_shows_gradient_exclusions(capsys):
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert list(rows) == list(ADAPTERS)
    # tf-block's BlockLSTMGrad ignores cell_clip: gradients, but not with cell_clip
    assert rows["tf-block"][-1] == ("peepholes, cell_clip, variable_lengths, "
                                    "gradients (not with cell_clip)")
    assert rows["tf-block-v2"][-1].endswith(", gradients (not with cell_clip)")
    # no exclusions: plain "gradients"; no backward pass: not listed
    assert rows["torch-cpu"][-1] == "projection, variable_lengths, gradients"
    assert "gradients" not in rows["onnxruntime"][-1]
    # the note under the table says why
    note = out.split("Gradients not compared (forward only) for cases with these features:\n")[1]
    note = note.split("\n\n")[0].replace("\n    ", " ")  # wrapped lines joined
    assert "  torch-compile: run when named: " in out.split("Left out of the default selection")[1]
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
    assert features_column(caps) == ("peepholes,variable_lengths,"
                               "gradients (not with cell_clip or gate_clip)")
    # reasons without a backward pass at all: no gradients entry
    no_backward = Capabilities(gradient_reasons={"cell_clip": "why"})
    assert features_column(no_backward) == "variable_lengths"


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
    assert entry["available"] is False and entry["checked"] is False
    assert entry["reason"] == (f"needs onnxruntime>={MINIMUM_VERSIONS['onnxruntime']}, "
                               "found 1.18.1")


def test_each_known_bug_shows_what_was_measured(capsys):
    """Per known bug: the releases it was seen on, the first that fixes it (none measured yet),
    and the releases bisect tried with the verdict each, in the text and in --json."""
    assert main(["adapters"]) == 0
    notes = " ".join(capsys.readouterr().out.split("Known upstream bugs")[1].split())
    flax = notes.split("flax-nnx: google/flax#5594")[1]
    assert "seen on flax 0.12.8, flax 0.12.10, flax 0.12.12; fixed in none measured; bisect " \
           "tried: flax on Python 3.11: 0.12.0 to 0.12.7 (8 releases) unavailable, 0.12.8 known " \
           "upstream bug, 0.12.9, 0.12.10, 0.12.12 not installed or run; flax on Python 3.12: " \
           "0.12.8, 0.12.9 error, 0.12.10, 0.12.12 known upstream bug" in flax
    assert "seen on executorch 1.5.1 + torch 2.13.0; fixed in none measured; bisect tried: " \
           "none" in notes
    assert main(["adapters", "--json"]) == 0
    entry, = json.loads(capsys.readouterr().out)["flax-nnx"]["known_bugs"]
    assert (entry["upstream"], entry["seen_on"], entry["fixed_in"]) == (
        "google/flax#5594", [{"flax": "0.12.8"}, {"flax": "0.12.10"}, {"flax": "0.12.12"}], None)
    on_311, on_312 = entry["bisect_tried"]
    assert (on_311["python"], on_311["verdicts"]["0.12.8"], len(on_311["verdicts"])) == (
        "3.11", "known upstream bug", 12)
    assert (on_312["python"], on_312["verdicts"]["0.12.12"]) == ("3.12", "known upstream bug")
