"""Importing TensorFlow: once, without its C++ start-up chatter, its native log lines off for the
rest of the process; and file descriptor 2 sent to scratch around a native call. What the
TensorFlow, Keras and LiteRT adapters and the tools that load a Keras model (``convert``,
``compare`` of a ``.tflite``) share."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from harness.errors import Unavailable
from harness.frameworks.native_stderr import native_stderr_captured


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """File descriptor 2 sent to a scratch file, then restored. TensorFlow's C++ start-up lines
    (``I0000 ... cudart_stub.cc``, ``E0000 ... cuInit``) are written to fd 2 before Python
    logging exists; :data:`NATIVE_LOG_ENV` hides them too, and this also covers what its
    Python-side start-up prints to fd 2. Only the import and the device discovery run inside,
    so the harness's own progress and errors are untouched."""
    if "tensorflow" in sys.modules:  # imported already: nothing more to hide
        yield
        return
    with native_stderr_to_scratch():
        yield


@contextmanager
def native_stderr_to_scratch() -> Iterator[None]:
    """File descriptor 2 (what C++ code writes, which Python's redirections do not reach) sent
    to a scratch file for the duration, then restored; its lines dropped."""
    with native_stderr_captured():
        yield


# TensorFlow's native logging (tsl, on absl since 2.16) reads these once, when TensorFlow logs
# its first line, in the process that imports it: set here, before the import, they hold in every
# process that runs a TensorFlow adapter (the run's, and --isolate/--jobs workers). Level 3
# (FATAL only) is needed: "E0000 ... util.cc:131] oneDNN supports DT_BOOL only on platforms with
# AVX-512" is an ERROR line logged at a keras/tf-legacy pair's first graph run, after the import
# and outside quiet_native_stderr. VLOG lines are switched on by the other two, so they go.
NATIVE_LOG_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_CPP_MAX_VLOG_LEVEL": "0", "TF_CPP_VMODULE": ""}


def import_tf():
    """TensorFlow, imported (and its devices discovered) without its C++ start-up chatter, and
    with its native log lines off for the rest of the process (:data:`NATIVE_LOG_ENV`, a user's
    own TF_CPP_MIN_LOG_LEVEL included: the terminal is for the harness's progress and errors;
    Python warnings and faulthandler tracebacks are untouched)."""
    if "tensorflow" not in sys.modules:
        os.environ.update(NATIVE_LOG_ENV)
    try:
        with quiet_native_stderr():
            import tensorflow as tf

            tf.config.list_physical_devices()  # cuInit and friends log here, once
    except ImportError as exc:
        raise Unavailable(f"tensorflow is not installed ({exc}); pip install tensorflow") from None
    return tf
