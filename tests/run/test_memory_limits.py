"""The memory guard's default limits follow the machine (harness.memory.max_memory): on the
host min(50 % of RAM, available RAM), never more than the process's own limits (RLIMIT_AS,
RLIMIT_DATA) leave, the RAM capped by a memory cgroup; for GPU work 80 % of the free GPU memory;
a refusal names both and the override; run.json records them. The machine is stood in for (RAM,
nvidia-smi, cgroup files), so these tests say the same on any machine."""

from __future__ import annotations

import io
import json
import os
import resource
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
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
        monkeypatch.setattr(memory, "process_limits", lambda: [])  # no ulimit -v / -d

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


def _npz_declaring(path: Path, nbytes: int) -> Path:
    """An .npz whose one member's .npy header and zip entry declare ``nbytes`` of float64 data
    (zip64 sizes), while the file holds a few hundred bytes."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False,
                                                "shape": (nbytes // 8,)})
    data = head.getvalue() + bytes(64)
    name, crc = b"weight_ih_l0.npy", zlib.crc32(data)
    extra = struct.pack("<HHQ", 1, 8, len(head.getvalue()) + nbytes)  # zip64: the real size
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, 0, 0, 0, 0, crc, len(data),
                        0xFFFFFFFF, len(name), len(extra)) + name + extra
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc, len(data),
                          0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0) + name + extra
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central),
                      len(local) + len(data), 0)
    path.write_bytes(local + data + central + end)
    return path


_LARGE_MACHINE = """
import sys
from harness import memory
memory.host_memory = lambda: (128 * 2**30, 120 * 2**30)  # the RAM would allow 5 GiB
from harness.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc/self/status")
def test_the_process_address_space_limit_bounds_the_default(tmp_path):
    """Under ulimit -v 3G on a machine with RAM to spare, a file declaring 5 GiB is refused by
    the guard, naming RLIMIT_AS, not by a MemoryError from NumPy's allocation."""
    weights = _npz_declaring(tmp_path / "w.npz", 5 * GiB)
    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: lstm\ninput_size: 2\nhidden_size: 3\n")
    env = {k: v for k, v in os.environ.items() if k != memory.MAX_MEMORY_ENV}
    env["OPENBLAS_NUM_THREADS"] = "1"  # its per-thread buffers are address space too
    done = subprocess.run(
        [sys.executable, "-c", _LARGE_MACHINE, "convert", "--case", str(case), "--from", "torch",
         "--to", "canonical", str(weights), str(tmp_path / "o.npz")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (3 * GiB, 3 * GiB)))
    err = done.stderr.splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert f"{weights}: holds 5 GiB of arrays, more than the memory limit of " in err[0], err
    assert "(the process's RLIMIT_AS 3 GiB" in err[0] and "MemoryError" not in err[0], err


def test_process_limits_lower_the_default_and_name_themselves(monkeypatch):
    monkeypatch.delenv(memory.MAX_MEMORY_ENV, raising=False)
    monkeypatch.setattr(memory, "host_memory", lambda: (128 * GiB, 120 * GiB))
    monkeypatch.setattr(memory, "process_limits", lambda: [(5 * GiB, "the process's RLIMIT_DATA"
                                                            " 6 GiB, 1 GiB of it in use")])
    limit = memory.max_memory()
    assert limit == 5 * GiB and limit.why.startswith("the process's RLIMIT_DATA 6 GiB")
    assert memory.max_memory("8GiB") == 8 * GiB  # an explicit limit is the user's choice


def test_process_limits_are_read_from_the_process():
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    found = {why.split()[2]: left for left, why in memory.process_limits()}
    assert ("RLIMIT_AS" in found) == (soft != resource.RLIM_INFINITY)


@pytest.mark.parametrize("files", [
    {"memory.max": "8589934592", "memory.current": "1073741824"},
    {"memory/memory.limit_in_bytes": "8589934592", "memory/memory.usage_in_bytes": "1073741824"},
])
def test_a_memory_cgroup_v2_or_v1_caps_the_machine(files, monkeypatch):
    monkeypatch.setattr(memory, "_cgroup_bytes", lambda name: int(files[name]) if name in files
                        else None)
    ram, available = memory.host_memory()
    assert ram <= 8 * GiB and available <= 7 * GiB
