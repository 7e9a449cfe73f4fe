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
    # "max" (v2) is no limit; v1 says no limit with a number near 2**63, which min() ignores
    return int(text) if text.isdigit() else None


def _cgroup_limit() -> tuple[int, int] | None:
    """(limit, in use) bytes of this process's memory cgroup: v2 ``memory.max``, else v1
    ``memory/memory.limit_in_bytes``; None where neither limits it."""
    for limit, used in (("memory.max", "memory.current"),
                        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        cap = _cgroup_bytes(limit)
        if cap is not None:
            return cap, _cgroup_bytes(used) or 0
    return None


def host_memory() -> tuple[int, int] | None:
    """(RAM, available) bytes of this machine, or of its container where a cgroup limits it
    (:func:`_cgroup_limit`):
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
    cgroup = _cgroup_limit()
    if cgroup is not None:
        cap, used = cgroup
        total, available = min(total, cap), min(available, max(cap - used, 0))
    return total, available


# the process's own limits (ulimit -v, ulimit -d) and what it already uses of each
_RLIMITS = (("RLIMIT_AS", "VmSize:"), ("RLIMIT_DATA", "VmData:"))


def process_limits() -> list[tuple[int, str]]:
    """(bytes left, where from) under each limit the process itself has (``RLIMIT_AS``,
    ``RLIMIT_DATA``, as ``ulimit -v`` / ``-d`` set them): the limit less what the process
    already uses of it (/proc/self/status). An allocation past one fails whatever the RAM."""
    try:
        import resource
    except ImportError:  # not on POSIX: no such limits
        return []
    try:
        status = dict(line.split(":", 1) for line in
                      Path("/proc/self/status").read_text().splitlines() if ":" in line)
    except OSError:
        status = {}
    found = []
    for name, key in _RLIMITS:
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        try:
            used = int(status[key.rstrip(":")].split()[0]) * 1024
        except (KeyError, ValueError, IndexError):
            used = 0
        found.append((max(soft - used, 0), f"the process's {name} {gib(soft)}, "
                                           f"{gib(used)} of it in use"))
    return found


def max_memory(value: str | int | None = None, *, gpu_work: bool = False) -> MemoryLimit:
    """The memory limits: ``value`` (the --max-memory option), else the environment variable
    RNN_HARNESS_MAX_MEMORY, for host and GPU alike; else what the machine has: on the host
    min(50 % of RAM, available RAM), and for GPU work (``gpu_work``) 80 % of the GPU memory
    free now (4 GiB where the machine says nothing). The host default is never more than the
    process may still allocate under its own limits (:func:`process_limits`); the limit says
    which rule set it."""
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
    for left, why in process_limits():
        if left < limit:
            limit = MemoryLimit(left, why)
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


