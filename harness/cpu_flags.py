"""The CPU instruction-set extensions that change integer (quantized) results: the int8 dot
products of VNNI (``avx512_vnni``, ``avx_vnni``) and AMX (``amx_int8``) accumulate without
the 16-bit saturation of the AVX2/AVX-512BW ``vpmaddubsw`` path, so one int8 kernel can give
different numbers on two x86-64 machines; on Arm, the dot-product (``asimddp``) and int8
matrix-multiply (``i8mm``) extensions play that part. Read from ``/proc/cpuinfo`` (Linux), once
per process; elsewhere the record says it could not read them.
"""

from __future__ import annotations

import functools
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# flag -> the family it belongs to, as run.json reports them
FAMILIES = {
    "avx512_vnni": "vnni", "avx_vnni": "vnni", "avx512_bf16": "avx512",
    "amx_tile": "amx", "amx_int8": "amx", "amx_bf16": "amx",
    "avx512f": "avx512", "avx512bw": "avx512", "avx512vl": "avx512", "avx512dq": "avx512",
    "avx2": "avx2", "fma": "avx2",
    "asimddp": "arm_dotprod", "i8mm": "arm_i8mm",
}


def parse(text: str) -> dict[str, object]:
    """The record of a ``/proc/cpuinfo`` text: per family whether any of its flags is present,
    and those flags (sorted). The first processor's ``flags`` (x86) or ``Features`` (Arm)
    line."""
    line = next((ln for ln in text.splitlines()
                 if ln.split(":")[0].strip() in ("flags", "Features")), None)
    if line is None:
        return {"source": f"{CPUINFO}: no flags line"}
    present = set(line.split(":", 1)[1].split())
    found = sorted(present & set(FAMILIES))
    record: dict[str, object] = {f: False for f in sorted(set(FAMILIES.values()))}
    for flag in found:
        record[FAMILIES[flag]] = True
    record["flags"] = found
    return record


@functools.cache
def cpu_flags() -> dict[str, object]:
    """:func:`parse` of this machine's ``/proc/cpuinfo``, or why it could not be read."""
    try:
        return parse(CPUINFO.read_text(errors="replace"))
    except OSError as exc:
        return {"source": f"{CPUINFO} not readable ({exc.strerror})"}
