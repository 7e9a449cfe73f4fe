"""The memory guard's limits: how much host (and GPU) memory one case may take, from
``--max-memory``, the environment, or what the machine has. Below everything that reads files
or prepares cases, so a format reader can bound what it reads by the same rule."""

from __future__ import annotations

import math
import os
import re
from decimal import Decimal
from pathlib import Path

from harness.errors import HarnessError
from harness.gpus import gpu_free_memory

DEFAULT_MAX_MEMORY = 4 * 2**30
MAX_MEMORY_ENV = "RNN_HARNESS_MAX_MEMORY"
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
          "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12,
          "tib": 2**40}


def parse_size(text: str | int, *, what: str = "--max-memory") -> int:
    """Bytes from ``4GiB``, ``512M``, ``1e9`` or a plain integer (k/M/G decimal, KiB/MiB/GiB
    binary)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = float(text), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", str(text).lower())
        if m is None or m.group(2) not in _UNITS:
            raise HarnessError(f"expected a size like 4GiB, 512MiB or 1000000000, got {text!r}",
                               field=what)
        value, unit = float(m.group(1)), m.group(2)
    if not math.isfinite(value * _UNITS[unit]):
        raise HarnessError(f"expected a finite size, got {text!r}", field=what)
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise HarnessError(f"expected a positive size, got {text!r}", field=what)
    return size


class MemoryLimit(int):
    """The host memory limit in bytes (an int, as every reader of ``max_memory()`` takes it),
    with where it came from and the limit for GPU work (None: no GPU work, or no GPU seen)."""

    why: str
    gpu: int | None
    gpu_why: str

    def __new__(cls, host: int, why: str, gpu: int | None = None,
                gpu_why: str = "no GPU work") -> MemoryLimit:
        self = super().__new__(cls, host)
        self.why, self.gpu, self.gpu_why = why, gpu, gpu_why
        return self

    def __reduce__(self):  # pickled to worker processes (run --jobs) with its attributes
        return (MemoryLimit, (int(self), self.why, self.gpu, self.gpu_why))

    def describe(self) -> str:
        gpu = (f"{gib(self.gpu)}: {self.gpu_why}" if self.gpu is not None
               else f"none, {self.gpu_why}")
        return f"host limit {gib(int(self))}: {self.why}; GPU limit {gpu}"

    def record(self) -> dict:
        """For run.json: both limits and where they came from."""
        return {"host_bytes": int(self), "host": self.why, "gpu_bytes": self.gpu,
                "gpu": self.gpu_why}


HOST_SHARE = 0.5  # of RAM, and never more than is available now
GPU_SHARE = 0.8  # of the GPU memory free now (cuDNN workspaces, the allocator's caching)


def _cgroup_bytes(name: str) -> int | None:
    try:
        text = (Path("/sys/fs/cgroup") / name).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def host_memory() -> tuple[int, int] | None:
    """(RAM, available) bytes of this machine, or of its container where a cgroup limits it:
    /proc/meminfo (MemTotal, MemAvailable), else ``os.sysconf``; None where neither says."""
    total = available = None
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines()
                    if ":" in line)
        total = int(info["MemTotal"].split()[0]) * 1024
        available = int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        try:
            page = os.sysconf("SC_PAGE_SIZE")
            total = os.sysconf("SC_PHYS_PAGES") * page
            available = os.sysconf("SC_AVPHYS_PAGES") * page
        except (OSError, ValueError, AttributeError):
            return None
    cap = _cgroup_bytes("memory.max")
    if cap is not None:
        used = _cgroup_bytes("memory.current") or 0
        total, available = min(total, cap), min(available, max(cap - used, 0))
    return total, available


def max_memory(value: str | int | None = None, *, gpu_work: bool = False) -> MemoryLimit:
    """The memory limits: ``value`` (the --max-memory option), else the environment variable
    RNN_HARNESS_MAX_MEMORY, for host and GPU alike; else what the machine has: on the host
    min(50 % of RAM, available RAM), and for GPU work (``gpu_work``) 80 % of the GPU memory
    free now (4 GiB where the machine says nothing)."""
    if value is not None:
        size = parse_size(value)
        return MemoryLimit(size, "set by --max-memory", size if gpu_work else None,
                           "set by --max-memory" if gpu_work else "no GPU work")
    env = os.environ.get(MAX_MEMORY_ENV)
    if env:
        size = parse_size(env, what=MAX_MEMORY_ENV)
        why = f"set by {MAX_MEMORY_ENV}"
        return MemoryLimit(size, why, size if gpu_work else None,
                           why if gpu_work else "no GPU work")
    host = host_memory()
    if host is None:
        limit = MemoryLimit(DEFAULT_MAX_MEMORY, "the default (this machine's RAM is unknown)")
    else:
        total, available = host
        limit = MemoryLimit(min(int(total * HOST_SHARE), available),
                            f"min(50 % of RAM {gib(total)}, available {gib(available)})")
    if gpu_work:
        free = gpu_free_memory()
        if free is None:
            limit.gpu_why = "unknown (no GPU seen by nvidia-smi)"
        else:
            limit.gpu, limit.gpu_why = int(free * GPU_SHARE), f"80 % of free {gib(free)}"
    return limit


def gib(n: int) -> str:
    if n < 2**1000:
        return f"{n / 2**30:.3g} GiB"
    return f"{Decimal(n) / 2**30:.3g} GiB"  # beyond a float's range


