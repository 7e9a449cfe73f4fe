"""What every reader checks before it reads: the file is a regular file, its size (or a zip's
members once inflated) is within the memory limit, and whatever a malformed file makes a reader
raise comes out as one line naming the file.

The files may come from strangers: sizes are checked against the memory limit before anything
is read. Each format adds its own checks beside its reader (an HDF5 file's links and declared
datasets, a flax tree's depth and entries, an ONNX model's external data).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.errors import WeightsError, whole_sentences
from harness.npz import limit_origin

T = TypeVar("T")


def check_file(path: Path) -> None:
    if not path.exists():
        raise WeightsError("weights file not found", file=path)
    if not path.is_file():  # a folder; a FIFO would block the first read forever
        raise WeightsError("not a regular file (a folder, FIFO, device or socket): refused",
                           file=path)


def check_size(path: Path, size: int, max_bytes: int | None, what: str,
                field: str | None = None) -> None:
    """Refuse ``size`` bytes (a file's, a zip member's once inflated, an HDF5 dataset's as
    declared) over the memory limit, before anything is read."""
    if max_bytes is not None and size > max_bytes:
        raise WeightsError(f"{what} {size / 2**30:.3g} GiB, more than the memory limit of "
                           f"{max_bytes / 2**30:.3g} GiB{limit_origin(max_bytes)}", file=path,
                           field=field)


def one_line(path: Path, read: Callable[[], T]) -> T:
    """``read()``, with whatever a malformed file makes a framework's reader (or ours) raise
    turned into one line naming the file."""
    try:
        return read()
    except WeightsError:
        raise
    except Exception as exc:  # a malformed file the framework's own reader chokes on
        raise WeightsError(f"not a readable {path.suffix.lower()} weights file "
                           f"({type(exc).__name__}: {whole_sentences(str(exc), 200)})",
                           file=path) from None


def check_zip(path: Path, max_bytes: int | None) -> None:
    """A zip (``torch.save``'s format) whose members would inflate past the memory limit is
    refused from its directory, before any member is read."""
    if not zipfile.is_zipfile(path):
        return
    with zipfile.ZipFile(path) as z:
        check_size(path, sum(i.file_size for i in z.infolist()), max_bytes,
                    "inflates to")

