"""Hide installed packages from a Python process and every process it starts, as if they were
not installed: how the suite is checked on a machine without TensorFlow (the GPU runner has
none) without uninstalling it here.

    PYTHONPATH=tests/support/without RNN_HARNESS_HIDE=tensorflow,tf_keras,keras python -m pytest

Python imports ``sitecustomize`` at start-up from ``sys.path``; this one puts a finder first on
``sys.meta_path`` that refuses the named top-level packages (and their submodules) with the
ModuleNotFoundError an absent package gives, and makes ``importlib.util.find_spec`` answer None
for them, as it does for an absent package (torch's dynamo asks it whether TensorFlow is
installed, and an import error there would break torch.export). Child processes inherit both
variables.
"""

from __future__ import annotations

import importlib.util
import os
import sys

HIDDEN = frozenset(filter(None, os.environ.get("RNN_HARNESS_HIDE", "").split(",")))


class _Hidden:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by RNN_HARNESS_HIDE)",
                                      name=name)
        return None


_find_spec = importlib.util.find_spec


def _find_spec_of_installed(name, package=None):
    full = importlib.util.resolve_name(name, package) if name.startswith(".") else name
    return None if full.split(".")[0] in HIDDEN else _find_spec(name, package)


if HIDDEN:
    sys.meta_path.insert(0, _Hidden())
    importlib.util.find_spec = _find_spec_of_installed
