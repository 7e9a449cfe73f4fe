"""``run --require-gpu``: a GPU job must not pass without GPU work. Where a selected GPU adapter
cannot run, the run exits 1 before running anything, one line per such adapter with its reason
(without the option those pairs are "unavailable" rows and the run exits 0)."""

from __future__ import annotations

import pytest

from harness import adapters as registry
from harness.cli import main

CASE = "cases/reverse.yaml"


def unavailable_gpu_adapters() -> dict[str, str]:
    return {a.name: a.unavailable_reason() for a in registry.select(None, "gpu")
            if a.unavailable_reason()}


def test_require_gpu_names_each_missing_gpu_adapter(tmp_path, capsys):
    missing = unavailable_gpu_adapters()
    if not missing:
        pytest.skip("every GPU adapter is available here")
    out = tmp_path / "report"
    assert main(["run", CASE, "--device", "gpu", "--require-gpu", "--out", str(out),
                 "--quiet"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("--require-gpu")]
    assert lines == [f"--require-gpu: {name} unavailable: {reason}"
                     for name, reason in missing.items()]
    assert not out.exists()  # refused before running


def test_without_it_unavailable_gpu_adapters_are_rows_and_a_run_that_compared_nothing_fails(
        tmp_path, capsys):
    if not unavailable_gpu_adapters():
        pytest.skip("every GPU adapter is available here")
    assert main(["run", CASE, "--device", "gpu", "--out", str(tmp_path), "--quiet"]) == 1
    assert "nothing was compared" in capsys.readouterr().err


def test_require_gpu_with_no_gpu_adapter_selected(tmp_path, capsys):
    assert main(["run", CASE, "--device", "cpu", "--require-gpu", "--out", str(tmp_path),
                 "--quiet"]) == 1
    assert "--require-gpu: no GPU adapter selected" in capsys.readouterr().err
