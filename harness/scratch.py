"""A command's scratch space: the frameworks' config, caches and temporary files in a temporary
folder that is removed when the command ends, so that a run writes nothing outside the paths
it is given.

Left to themselves, the frameworks write into the user's home and temporary folders on import
or first use: Keras its ``~/.keras/keras.json`` (``KERAS_HOME``), Matplotlib its font cache and
config (``MPLCONFIGDIR``, else ``~/.cache/matplotlib``, ``~/.config/matplotlib``), ONNX Runtime
its telemetry device id (``$XDG_CACHE_HOME/Microsoft/DeveloperTools``), and libraries their
``$TMPDIR`` files. Each reads the variable when it first needs the folder, so the variables are
set before any framework is imported; worker processes inherit them.

A side effect: a Keras backend chosen in ``~/.keras/keras.json`` is not seen; ``KERAS_BACKEND``
still chooses one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

# variable -> its sub-folder of the scratch folder. JAX keeps no persistent compilation cache
# unless JAX_COMPILATION_CACHE_DIR names one (a user's own would be read and written).
FOLDERS = {"TMPDIR": "tmp", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config",
           "KERAS_HOME": "keras", "MPLCONFIGDIR": "matplotlib",
           "JAX_COMPILATION_CACHE_DIR": "jax"}


def make_folders(top: str) -> dict[str, str]:
    """Make the sub-folders of :data:`FOLDERS` in ``top``; variable -> folder."""
    env = {}
    for var, sub in FOLDERS.items():
        path = os.path.join(top, sub)
        os.mkdir(path, 0o700)
        env[var] = path
    return env


@contextlib.contextmanager
def scratch() -> Iterator[str | None]:
    """Point the variables of :data:`FOLDERS` at sub-folders of a new temporary folder (made in
    the caller's ``$TMPDIR``) for the duration; restore them and remove the folder afterwards.
    Where no temporary folder can be made, nothing is changed (the frameworks cannot write
    there either)."""
    try:
        top = tempfile.mkdtemp(prefix="rnn-harness-")
    except OSError:
        yield None
        return
    saved = {k: os.environ.get(k) for k in FOLDERS}
    saved_tempdir = tempfile.tempdir  # tempfile caches $TMPDIR on first use
    try:
        os.environ.update(make_folders(top))
        tempfile.tempdir = os.environ["TMPDIR"]
        yield top
    finally:
        tempfile.tempdir = saved_tempdir
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        shutil.rmtree(top, ignore_errors=True)
