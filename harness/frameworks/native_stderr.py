"""File descriptor 2 redirected for the duration of a framework's call: what C++ code writes
(TensorFlow's and the converters' log lines, the LiteRT interpreter's delegate line,
ExecuTorch's runtime), which Python's ``sys.stderr`` redirections do not reach."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def native_stderr_captured() -> Iterator[list[str]]:
    """File descriptor 2 sent to an unnamed scratch file for the duration, then restored; the
    list yielded holds the lines written there once the block ends (also when it raised)."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield lines
            finally:
                # a log handler may hold the real stream while sys.stderr is redirected
                for stream in (sys.stderr, sys.__stderr__):
                    if stream is not None:
                        stream.flush()
                os.dup2(saved, 2)
                scratch.seek(0)
                lines += scratch.read().decode("utf-8", "replace").splitlines()
    finally:
        os.close(saved)
