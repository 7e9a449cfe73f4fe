"""Whether this machine has a GPU, asked cheaply: ``nvidia-smi``, no framework imported and no
CUDA context made. The standard library only, so that tox's own interpreter can load this file
before it builds the ``gpu`` environment (``toxfile.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess


def gpu_free_memory() -> int | None:
    """Free bytes of the first visible GPU, from ``nvidia-smi`` (no CUDA context is made here);
    None where there is no GPU or no way to ask."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    cmd = [smi, "--query-gpu=memory.free", "--format=csv,noheader,nounits"]
    if visible:
        cmd += ["-i", visible.split(",")[0].strip()]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
        return int(float(out.split()[0])) * 2**20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gpu_present() -> bool:
    """Whether this machine has a GPU the GPU adapters could use: ``nvidia-smi`` answers for a
    visible one. The default device of ``run``, ``check()`` and the pytest plugin
    (:func:`harness.plan.default_device`) and tox's ``gpu`` environment (``toxfile.py``) ask
    it."""
    return gpu_free_memory() is not None
