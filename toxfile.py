"""tox's inline plugin (tox >= 4 loads ``toxfile.py`` beside tox.ini): ``tox -e gpu`` is for a
GPU runner, and on a machine without a GPU it fails before installing anything, not after
building a multi-GB environment (CuPy and friends) that could not run.

tox runs ``commands_pre`` only after the environment is built, so the check is the
``tox_on_install`` hook, called before each install (the package with its extras, deps). The
virtual environment itself (seconds, a few MB) is created before it. The check is
:func:`harness.gpus.gpu_present` (``nvidia-smi`` sees a GPU), loaded from its file: tox's own
interpreter has none of the harness's dependencies. ``RNN_HARNESS_GPU_CHECK=off`` skips it (a
GPU machine without nvidia-smi; the run's ``--require-gpu`` still refuses a run without GPU work).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from tox.plugin import impl
from tox.tox_env.errors import Fail

GPU_FACTOR = "gpu"


def _gpu_present() -> bool:
    path = Path(__file__).parent / "harness" / "gpus.py"
    spec = importlib.util.spec_from_file_location("_rnn_harness_gpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gpu_present()


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    if GPU_FACTOR not in tox_env.name.split("-"):
        return
    if os.environ.get("RNN_HARNESS_GPU_CHECK", "").lower() == "off":
        return
    if not _gpu_present():
        raise Fail(f"{tox_env.name} is for a GPU runner and nvidia-smi sees no GPU here: "
                   "nothing installed (tox -e test or tox -e cpu run on this machine; "
                   "RNN_HARNESS_GPU_CHECK=off skips this check)")
