"""``run --require-gpu``: a GPU job must not pass without GPU work. Where a selected GPU adapter
cannot run, the run exits 1 before running anything, one line per such adapter with its reason
(without the option those pairs are "unavailable" rows and the run exits 0).

Both machines are stood in for, so each test says the same on a CPU machine and on a GPU
runner: ``no_gpu`` makes every GPU adapter unavailable; ``gpu`` replaces them by stand-ins
that run the float64 reference (the GPU-present path of the command line, on any machine)."""

from __future__ import annotations

import pytest
from support.fault_adapters import Correct

from harness import adapters as registry
from harness import prepare
from harness.cli import main

CASE = "cases/reverse.yaml"
NO_GPU = "stand-in: no CUDA device"


class StandInGPU(Correct):
    """A GPU adapter that runs here: the reference, on the CPU."""

    device = "gpu"


@pytest.fixture
def no_gpu(monkeypatch) -> dict[str, str]:
    monkeypatch.setattr(prepare, "baseline_arrays", lambda device: None)  # the baseline: NumPy
    gpu = [a for a in registry.select(None, "gpu") if not a.baseline]
    for adapter in gpu:
        monkeypatch.setattr(adapter, "unavailable_reason", lambda: NO_GPU)
        monkeypatch.setattr(adapter, "requires", ())  # installed, as on a machine with all of them
    return {a.name: NO_GPU for a in gpu}


@pytest.fixture
def gpu(monkeypatch) -> list[str]:
    names = [a.name for a in registry.select(None, "gpu") if not a.baseline]
    for name in names:
        stand_in = StandInGPU()
        stand_in.name = name
        monkeypatch.setitem(registry.ADAPTERS, name, stand_in)
    return names


def test_require_gpu_names_each_missing_gpu_adapter(no_gpu, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["run", CASE, "--device", "gpu", "--require-gpu", "--out", str(out),
                 "--quiet"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("--require-gpu")]
    assert lines == [f"--require-gpu: {name} unavailable: {reason}"
                     for name, reason in no_gpu.items()]
    assert not out.exists()  # refused before running


def test_without_it_unavailable_gpu_adapters_are_rows_and_a_run_that_compared_nothing_fails(
        no_gpu, tmp_path, capsys):
    assert main(["run", CASE, "--device", "gpu", "--out", str(tmp_path), "--quiet"]) == 1
    assert "nothing was compared" in capsys.readouterr().err


def test_with_a_gpu_the_gpu_run_compares_and_passes(gpu, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["run", CASE, "--device", "gpu", "--require-gpu", "--out", str(out),
                 "--quiet"]) == 0
    summary = capsys.readouterr().out
    assert f"{len(gpu) + 1} adapter(s)" in summary and " pass" in summary, summary
    assert "unavailable" not in summary and "error" not in summary, summary


def test_require_gpu_with_no_gpu_adapter_selected(tmp_path, capsys):
    assert main(["run", CASE, "--device", "cpu", "--require-gpu", "--out", str(tmp_path),
                 "--quiet"]) == 1
    assert "--require-gpu: no GPU adapter selected" in capsys.readouterr().err


def test_a_gpu_adapter_whose_framework_is_not_installed_is_noted_not_refused(
        gpu, monkeypatch, tmp_path, capsys):
    """A runner image without TensorFlow: its GPU adapters are noted and stay unavailable rows;
    the GPU adapters of the frameworks it has must run, and do."""
    absent = registry.ADAPTERS[gpu[0]]
    monkeypatch.setattr(absent, "requires", ("no-such-distribution",))
    monkeypatch.setattr(absent, "unavailable_reason", lambda: "no-such-distribution is absent")
    assert main(["run", CASE, "--device", "gpu", "--require-gpu", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    assert (f"--require-gpu: note: {absent.name} not run: no-such-distribution not installed "
            "here (no-such-distribution is absent)") in err


def test_require_gpu_refuses_when_no_gpu_adapter_can_run_even_if_none_is_installed(
        gpu, monkeypatch, tmp_path, capsys):
    for name in gpu:
        adapter = registry.ADAPTERS[name]
        monkeypatch.setattr(adapter, "requires", ("no-such-distribution",))
        monkeypatch.setattr(adapter, "unavailable_reason", lambda: "absent")
    assert main(["run", CASE, "--device", "gpu", "--require-gpu", "--out", str(tmp_path / "r"),
                 "--quiet"]) == 1
    assert "--require-gpu: no selected GPU adapter can run here" in capsys.readouterr().err
