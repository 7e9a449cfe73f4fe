"""The memory guard's default limits follow the machine (harness.memory.max_memory): on the
host min(50 % of RAM, available RAM), for GPU work 80 % of the free GPU memory; a refusal names
both and the override; run.json records them. The machine is stood in for (RAM, nvidia-smi), so
these tests say the same on any machine."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from harness import memory, prepare
from harness.cases import discover
from harness.cli import main
from harness.errors import CaseError

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30


@pytest.fixture
def machine(monkeypatch):
    """A stand-in machine: ``machine(ram, available, gpu_free)`` in bytes (gpu_free None: no
    GPU)."""
    monkeypatch.delenv(memory.MAX_MEMORY_ENV, raising=False)

    def make(ram: int, available: int, gpu_free: int | None = None) -> None:
        monkeypatch.setattr(memory, "host_memory", lambda: (ram, available))
        monkeypatch.setattr(memory, "gpu_free_memory", lambda: gpu_free)

    return make


def test_host_default_is_half_the_ram_or_what_is_available(machine):
    machine(128 * GiB, 120 * GiB)
    limit = memory.max_memory()
    assert limit == 64 * GiB and "50 % of RAM 128 GiB" in limit.why and limit.gpu is None
    machine(128 * GiB, 10 * GiB)
    assert memory.max_memory() == 10 * GiB


def test_gpu_default_is_80_percent_of_free_gpu_memory(machine):
    machine(128 * GiB, 120 * GiB, gpu_free=80 * GiB)
    limit = memory.max_memory(gpu_work=True)
    assert limit.gpu == 64 * GiB and "80 % of free 80 GiB" in limit.gpu_why
    assert memory.max_memory(gpu_work=False).gpu is None


def test_the_override_sets_both_limits(machine, monkeypatch):
    machine(128 * GiB, 120 * GiB, gpu_free=80 * GiB)
    limit = memory.max_memory("2GiB", gpu_work=True)
    assert limit == limit.gpu == 2 * GiB and limit.why == "set by --max-memory"
    monkeypatch.setenv(memory.MAX_MEMORY_ENV, "3GiB")
    assert memory.max_memory(gpu_work=True).gpu == 3 * GiB


def test_a_refusal_names_both_limits_and_the_override(machine):
    case = discover([str(ROOT / "cases-gpu")])[0]
    machine(128 * GiB, 120 * GiB, gpu_free=2 * GiB)  # the host holds it, the GPU does not
    with pytest.raises(CaseError) as e:
        prepare.check_memory(case, memory.max_memory(gpu_work=True))
    text = str(e.value)
    for words in ("on the GPU", "GPU memory limit of 1.6 GiB", "host limit 64 GiB",
                  "80 % of free 2 GiB", "--max-memory", memory.MAX_MEMORY_ENV):
        assert words in text, text
    machine(6 * GiB, 6 * GiB)
    with pytest.raises(CaseError, match=r"more than the memory limit of 3 GiB \(host limit 3 GiB"
                                        r": min\(50 % of RAM 6 GiB.*GPU limit none"):
        prepare.check_memory(case, memory.max_memory())


@pytest.mark.parametrize("folder", ["cases", "cases-gpu"])
def test_every_bundled_case_runs_by_default_on_a_gpu_runner(machine, folder):
    """The measured runner: 128 GiB of RAM, an H100 with about 79 GiB free."""
    machine(128 * GiB, 120 * GiB, gpu_free=79 * GiB)
    limit = memory.max_memory(gpu_work=True)
    for case in discover([str(ROOT / folder)]):
        prepare.check_memory(case, limit)


def test_ram_is_read_from_the_machine():
    ram, available = memory.host_memory()
    assert 0 < available <= ram


def test_gpu_memory_is_read_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 81000\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert memory.gpu_free_memory() == 81000 * 2**20
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden
    assert memory.gpu_free_memory() is None


def test_run_json_records_the_limits(machine, tmp_path):
    machine(16 * GiB, 12 * GiB)
    out = tmp_path / "r"
    code = main(["run", str(ROOT / "cases" / "forget-bias.yaml"), "--adapters", "noise-floor",
                 "--device", "cpu", "--out", str(out), "--quiet"])
    assert code == 1  # the noise floor alone tests no framework: vacuous, exit 1
    limits = json.loads((out / "run.json").read_text())["memory_limits"]
    assert limits["host_bytes"] == 8 * GiB and "50 % of RAM 16 GiB" in limits["host"]
