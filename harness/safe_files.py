"""Creating files and folders without following links: the one way the harness writes.

A folder the harness writes into (``--out`` and everything below it, a reproducer's folder,
``init``'s folder) that is a symbolic link is refused, naming it: a link there would put files
wherever it points (a downloaded report's ``repro/x`` linked to ``~/.ssh``). The folders above
it are the user's own path and may hold links. A file is written whole into a new temporary
file of its folder (``O_EXCL | O_NOFOLLOW``) and renamed over its name, so a link of that name
is replaced, never written through, and a killed run leaves no half-written file.

Each folder is opened relative to the one above it (``dir_fd``, ``O_NOFOLLOW``) from the top
folder down, so a link put in place after a check is refused too. Where the platform has no
``dir_fd`` (Windows), each folder is checked by path instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from harness.errors import HarnessError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_AT = (_NOFOLLOW and _DIRECTORY and hasattr(os, "fchmod")
       and {os.open, os.mkdir, os.rename, os.unlink, os.stat} <= os.supports_dir_fd)
FILE_MODE = 0o644  # reports and reproducers are for people and web servers, whatever the umask


def link_error(path: str | Path, field: str | None = None) -> HarnessError:
    """The refusal of a folder (or file) the harness would write through: one line naming it."""
    return HarnessError("is a symbolic link, and rnn-harness does not write through links: "
                        "give a folder of its own", file=path, field=field)


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def check(path: str | Path, top: str | Path | None = None, *, field: str | None = None) -> None:
    """Refuse, before anything is written, a link at ``top`` or at any existing folder between
    it and ``path`` (``path`` included); ``top`` defaults to ``path``. Missing ones are fine."""
    path = Path(path)
    here = path if top is None else Path(top)
    below = path.relative_to(here).parts
    for n in range(len(below) + 1):
        if _is_link(here):
            raise link_error(here, field)
        if n == len(below) or not here.is_dir():
            return
        here = here / below[n]


def _chain(path: Path, top: Path | None) -> tuple[Path, list[str]]:
    """The folder opened by path (the user's, links followed) and the names below it opened
    without following links: ``top``'s own name and those from it down to ``path``."""
    if top is None:
        return path, []
    below = list(path.relative_to(top).parts)
    if top.name in ("", ".", ".."):  # the current folder or one above: the user's own
        return top, below
    return top.parent, [top.name, *below]


def _open_child(parent: int, name: str, shown: Path, field: str | None) -> int:
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=parent)
        return os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                raise link_error(shown, field) from None
        exc.filename = str(shown)
        raise


@contextlib.contextmanager
def _folder_fd(path: Path, top: Path | None, field: str | None) -> Iterator[int | None]:
    """``path`` made where missing and opened (None without ``dir_fd``); no link from ``top``
    down (``top`` None: ``path`` is the user's own, links followed)."""
    start, names = _chain(path, top)
    if not _AT:
        here = start
        start.mkdir(parents=True, exist_ok=True)
        for name in names:
            here = here / name
            if _is_link(here):
                raise link_error(here, field)
            here.mkdir(exist_ok=True)
        yield None
        return
    start.mkdir(parents=True, exist_ok=True)
    fd = os.open(start, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        here = start
        for name in names:
            here = here / name
            parent, fd = fd, -1
            try:
                fd = _open_child(parent, name, here, field)
            finally:
                os.close(parent)
        yield fd
    finally:
        if fd >= 0:
            os.close(fd)


def folder(path: str | Path, top: str | Path | None = None, *,
           field: str | None = None) -> Path:
    """Make the folder ``path`` (and the missing ones above it), refusing a link at ``top`` or
    below it (``top`` defaults to ``path``: the folder itself may not be a link; the folders
    above ``top`` are the user's path). Returns ``path``."""
    path = Path(path)
    with _folder_fd(path, path if top is None else Path(top), field):
        pass
    return path


@contextlib.contextmanager
def created(path: str | Path, top: str | Path | None = None, *, text: bool = False,
            field: str | None = None) -> Iterator[IO]:
    """A file object for the new content of ``path``, put in place when the block ends
    normally (a temporary file in the same folder, renamed over ``path``: a link named ``path``
    is replaced, not followed) and removed on an exception. ``top``: the folder written into,
    which and whose folders down to ``path``'s may not be links; None: ``path``'s folder is the
    user's (``diff --out FILE``), only ``path`` itself is never followed."""
    path = Path(path)
    tmp = f".rnn-harness-{secrets.token_hex(6)}.tmp"
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
             | getattr(os, "O_BINARY", 0))
    with _folder_fd(path.parent, None if top is None else Path(top), field) as dfd:
        where = {} if dfd is None else {"dir_fd": dfd}
        tmp_path = tmp if dfd is not None else str(path.parent / tmp)
        fd = os.open(tmp_path, flags, FILE_MODE, **where)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "w" if text else "wb",
                           **({"encoding": "utf-8"} if text else {})) as f:
                yield f
            if dfd is None:
                os.replace(tmp_path, path)
            else:
                # rename(2) where dir_fd exists (POSIX) replaces, as os.replace does
                os.rename(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path, **where)
            raise


def write_bytes(path: str | Path, data: bytes, top: str | Path | None = None, *,
                field: str | None = None) -> None:
    """``data`` as the file ``path``, written as :func:`created` writes."""
    with created(path, top, field=field) as f:
        f.write(data)


def write_text(path: str | Path, text: str, top: str | Path | None = None, *,
               field: str | None = None) -> None:
    """``text`` (UTF-8) as the file ``path``, written as :func:`created` writes."""
    with created(path, top, text=True, field=field) as f:
        f.write(text)
