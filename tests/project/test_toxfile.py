"""``toxfile.py``: ``tox -e gpu`` on a machine without a GPU fails before installing anything.
tox is not a dependency of the suite: the hook is loaded with stand-ins for the two names it
takes from tox, and the machine is stood in for by a fake ``nvidia-smi`` on PATH (or none)."""

from __future__ import annotations

import importlib.util
import stat
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Fail(Exception):
    """tox.tox_env.errors.Fail: tox reports the environment failed, with the message."""


@pytest.fixture
def hook(monkeypatch):
    plugin = types.ModuleType("tox.plugin")
    plugin.impl = lambda f: f
    errors = types.ModuleType("tox.tox_env.errors")
    errors.Fail = Fail
    for name, module in (("tox", types.ModuleType("tox")), ("tox.plugin", plugin),
                         ("tox.tox_env", types.ModuleType("tox.tox_env")),
                         ("tox.tox_env.errors", errors)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("toxfile_under_test", ROOT / "toxfile.py")
    toxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toxfile)
    monkeypatch.delenv("RNN_HARNESS_GPU_CHECK", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return lambda env: toxfile.tox_on_install(types.SimpleNamespace(name=env), None, "", "package")


def _smi_on_path(monkeypatch, folder: Path, present: bool) -> None:
    """PATH with only a fake nvidia-smi (present) or none at all."""
    if present:
        smi = folder / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 81000\n")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(folder))


def test_tox_gpu_fails_before_installing_where_no_gpu_is_seen(hook, monkeypatch, tmp_path):
    _smi_on_path(monkeypatch, tmp_path, present=False)
    with pytest.raises(Fail, match="gpu is for a GPU runner and nvidia-smi sees no GPU here"):
        hook("gpu")
    hook("test")  # the other environments install as before
    hook("cpu")
    monkeypatch.setenv("RNN_HARNESS_GPU_CHECK", "off")  # a GPU machine without nvidia-smi
    hook("gpu")


def test_tox_gpu_installs_where_a_gpu_is_seen(hook, monkeypatch, tmp_path):
    _smi_on_path(monkeypatch, tmp_path, present=True)
    hook("gpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # every GPU hidden: as none
    with pytest.raises(Fail):
        hook("gpu")

