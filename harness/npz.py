"""Reading and writing .npz tensor files safely (never unpickling), with errors that name the
file; writing atomically (so a killed run never leaves a half-written file) and never through a
link."""

from __future__ import annotations

import contextlib
import math
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from harness.errors import HarnessError, WeightsError
from harness.safe_files import created

NPY_MAGIC = b"\x93NUMPY"


def load_npz(path: str | Path, *, what: str = "tensors", max_bytes: int | None = None
             ) -> dict[str, np.ndarray]:
    """All arrays of an .npz file, loaded with ``allow_pickle=False``.

    Every member's .npy header is read first and checked (plain numeric dtype, a declared size
    that the member really holds, at most ``max_bytes`` in all), so that neither an object array
    (which only pickle can load) nor a header claiming terabytes reaches ``np.load``.
    """
    path = Path(path)
    if path.is_dir():
        raise WeightsError(f"{what} file is a folder, expected an .npz file", file=path)
    if not path.exists():
        raise WeightsError(f"{what} file not found", file=path)
    if not path.is_file():  # a FIFO would block the first read forever
        raise WeightsError(f"{what} file is not a regular file (a FIFO, device or socket): "
                           "refused", file=path)
    try:
        with path.open("rb") as f:
            head = f.read(len(NPY_MAGIC))
        if head == NPY_MAGIC:
            raise WeightsError("is a single .npy array; expected an .npz archive of named arrays "
                               "(np.savez(path, name=array, ...))", file=path)
        if not zipfile.is_zipfile(path):
            raise WeightsError("not an .npz file (not a zip archive)", file=path)
        _check_members(path, max_bytes)
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except WeightsError:
        raise
    except ValueError as exc:  # object arrays need pickle: refused (normally caught above)
        raise WeightsError(f"cannot load without pickle ({exc})", file=path) from None
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, zlib.error, MemoryError) as exc:
        raise WeightsError(f"not a readable .npz file ({type(exc).__name__}: {exc})",
                           file=path) from None


def _check_members(path: Path, max_bytes: int | None) -> None:
    total = 0
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename
            if name.endswith("data.pkl"):  # torch.save writes a zip too: never unpickled here
                raise WeightsError("is a torch.save file (pickled), not an .npz: name it .pt "
                                   "(read with weights_only=True), or make an .npz with "
                                   "rnn-harness convert IN.pt OUT.npz", file=path)
            if not name.endswith(".npy"):
                raise WeightsError("not an .npy array (an .npz holds only name.npy members)",
                                   file=path, field=name)
            field = name[: -len(".npy")]
            with z.open(info) as f:
                try:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise WeightsError(f"unsupported .npy format version {version}",
                                           file=path, field=field)
                    header_size = f.tell()
                except ValueError as exc:
                    raise WeightsError(f"not a valid .npy array ({exc})", file=path,
                                       field=field) from None
            if dtype.hasobject:
                raise WeightsError("holds Python objects, which only pickle can load: refused "
                                   "(save numeric arrays)", file=path, field=field)
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > info.file_size - header_size:
                raise WeightsError(f"header declares {nbytes} bytes of data, the file holds "
                                   f"{info.file_size - header_size}: truncated or corrupt",
                                   file=path, field=field)
            total += nbytes
    if max_bytes is not None and total > max_bytes:
        raise WeightsError(f"holds {total / 2**30:.3g} GiB of arrays, more than the memory limit "
                           f"of {max_bytes / 2**30:.3g} GiB{limit_origin(max_bytes)}", file=path)


def limit_origin(max_bytes: int) -> str:
    """`` (where the limit comes from)`` for a :class:`harness.memory.MemoryLimit`, so that a
    refusal names the rule that set it (a process's RLIMIT_AS, an override, the RAM)."""
    why = getattr(max_bytes, "why", None)
    return f" ({why})" if why else ""


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A file that cannot be written (read-only, under a file, a full disk) is one line naming
    it, not a traceback naming a temporary file."""
    try:
        yield
    except OSError as exc:
        name = str(exc.filename or "")
        where = f" ({name})" if name and name != str(path) and not name.endswith(".tmp") else ""
        raise HarnessError(f"cannot write: {exc.strerror or exc}{where}", file=path) from None


def save_npz(path: str | Path, arrays: dict[str, np.ndarray], top: str | Path | None = None
             ) -> None:
    """Write an .npz whole or not at all, never through a link (:func:`harness.safe_files.created`;
    ``top``: the folder written into, which may hold no link down to the file)."""
    path = Path(path)
    with writing(path), created(path, top) as f:
        np.savez(f, **arrays)


def write_text(path: str | Path, text: str, top: str | Path | None = None) -> None:
    """Write a text file whole or not at all, never through a link (as :func:`save_npz`)."""
    path = Path(path)
    with writing(path), created(path, top, text=True) as f:
        f.write(text)
