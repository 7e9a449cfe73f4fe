"""``run``'s default selection: the devices this machine has. The CPU adapters everywhere, the
GPU adapters only where a GPU is present (:func:`harness.gpus.gpu_present`, stood in for
here, so each test says the same on a CPU machine and on a GPU runner); ``--require-gpu`` still
selects the GPU adapters and names those that cannot run."""

from __future__ import annotations

import pytest

from harness import adapters as registry
from harness import gpus, prepare
from harness.cli import main
from harness.plan import default_device

CASE = "cases/reverse.yaml"
NO_GPU = "stand-in: no CUDA device"


@pytest.fixture
def small_registry(monkeypatch) -> list[str]:
    """Two cheap CPU adapters and one GPU adapter that cannot run here: a default run stays
    fast while it shows which devices were selected."""
    keep = {n: registry.ADAPTERS[n] for n in ("reference", "noise-floor", "torch-cudnn")}
    monkeypatch.setattr(registry, "ADAPTERS", keep)
    monkeypatch.setattr(prepare, "baseline_arrays", lambda device: None)  # baseline: NumPy
    gpu = keep["torch-cudnn"]
    monkeypatch.setattr(gpu, "unavailable_reason", lambda: NO_GPU)
    monkeypatch.setattr(gpu, "requires", ())  # installed, as on a GPU runner with a broken CUDA
    return list(keep)


def _summary(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


@pytest.mark.parametrize("present, device", [(False, "cpu"), (True, "all")])
def test_the_default_selects_the_devices_this_machine_has(monkeypatch, present, device):
    monkeypatch.setattr(gpus, "gpu_present", lambda: present)
    assert default_device(None)[0] == device
    assert default_device("gpu") == ("gpu", "")  # given: as given
    assert default_device(None, require_gpu=True) == ("all", "")
    assert default_device(None, named=True) == ("all", "")  # a named GPU adapter is not dropped


def test_a_default_run_without_a_gpu_leaves_the_gpu_adapters_out_and_says_so(
        small_registry, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpus, "gpu_present", lambda: False)
    # the noise floor alone tests no framework: vacuous, exit 1
    assert main(["run", CASE, "--out", str(tmp_path / "r"), "--quiet", "--plots", "none"]) == 1
    line = _summary(capsys)
    assert "2 case(s), 2 adapter(s): 2 baseline, 2 pass; no GPU here: GPU adapters not " \
           "selected (--device all reports them)" in line, line
    assert "unavailable" not in line


def test_with_a_gpu_present_the_default_run_selects_the_gpu_adapters_too(
        small_registry, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpus, "gpu_present", lambda: True)
    main(["run", CASE, "--out", str(tmp_path / "r"), "--quiet", "--plots", "none"])
    line = _summary(capsys)
    # the GPU pairs after the CPU counts
    assert "3 adapter(s): 2 baseline, 2 pass; GPU pairs (1 adapter(s)): 2 " in line


def test_require_gpu_still_names_the_gpu_adapters_that_cannot_run(
        small_registry, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpus, "gpu_present", lambda: False)
    assert main(["run", CASE, "--require-gpu", "--out", str(tmp_path / "r"), "--quiet"]) == 1
    assert f"--require-gpu: torch-cudnn unavailable: {NO_GPU}" in capsys.readouterr().err


def test_help_says_what_the_default_selects(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: the devices this machine has" in out
