"""A report folder is written whole or not at all.

Every file of a report is written into a new hidden folder beside the report folder (same
parent, so the final rename stays on one file system): ``.NAME.partial-PID-RANDOM``. Only when
the report is complete is it swapped in: the previous folder is renamed aside
(``.NAME.old-PID-RANDOM``), the new one renamed to NAME, the old one removed. Until that swap
the previous report stays intact; nothing of it survives into the new one (no stale errors.log,
outputs/ or plots).

An interrupted run (Ctrl-C, SIGTERM, an exception) removes its partial folder; a SIGKILL cannot
be caught, so it leaves one behind, which the next run into the same folder removes (hidden
folders of this pattern whose process is gone).

:func:`check_writable` is called before anything runs: a report folder that cannot be created
(an existing file, a path under a file, a read-only or virtual file system) is bad input, found
in a second, not after the whole run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError

_REPORT_FILES = ("run.json", "divergence.csv", "summary.md", "index.html")


def _hidden(out: Path, kind: str) -> re.Pattern[str]:
    return re.compile(rf"^\.{re.escape(out.name)}\.{kind}-(\d+)-[A-Za-z0-9_]+$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def sweep(out: Path) -> list[Path]:
    """Remove the hidden partial and old folders of ``out`` left by runs that were killed (their
    process is gone); those of runs still going are left alone. Returns what was removed."""
    parent = out.parent
    removed = []
    if not parent.is_dir():
        return removed
    patterns = [_hidden(out, "partial"), _hidden(out, "old")]
    for entry in parent.iterdir():
        for pattern in patterns:
            m = pattern.match(entry.name)
            if m and not _pid_alive(int(m.group(1))) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


def _what(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def check_writable(out: str | Path, option: str = "--out") -> Path:
    """Refuse, as bad input, a report folder that cannot be written: an empty name, an existing
    file, a path under a file, a folder whose parent is not writable (the new report is swapped
    in there), a non-empty folder that is not a report folder (it would be replaced whole).
    Creates the missing parent folders; returns the path."""
    if str(out).strip() == "":
        raise HarnessError("expected a folder name, got an empty one", field=option)
    out = Path(out)
    if out.name in ("", ".", "..") or out.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise HarnessError("the report folder would replace the current folder or one above "
                           "it; give a folder of its own", file=out, field=option)
    if out.exists() or out.is_symlink():
        if not out.is_dir() or out.is_symlink():
            raise HarnessError("exists and is not a folder", file=out, field=option)
        try:
            entries = [p.name for p in out.iterdir()]
        except OSError as exc:
            raise HarnessError(f"cannot read the folder: {_what(exc)}", file=out,
                               field=option) from None
        if entries and not any(name in entries for name in _REPORT_FILES):
            raise HarnessError("is a folder that holds no report (no run.json, divergence.csv, "
                               "summary.md or index.html); a report replaces its folder whole, "
                               "so give a new folder or an earlier report's", file=out,
                               field=option)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=f".{out.name}.check-", dir=parent))
        try:
            (probe / "probe").write_bytes(b"x")
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except OSError as exc:
        raise HarnessError(f"cannot write a report here: {_what(exc)}", file=out,
                           field=option) from None
    return out


@contextlib.contextmanager
def staged(out: str | Path) -> Iterator[Path]:
    """Yield a new hidden folder beside ``out`` to write the whole report into; on leaving the
    block normally it replaces ``out``; on an exception (Ctrl-C, SIGTERM turned into one, a full
    disk) it is removed and ``out`` is left as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep(out)
    pid = os.getpid()
    try:
        partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-{pid}-", dir=out.parent))
    except OSError as exc:
        raise HarnessError(f"cannot write a report here: {_what(exc)}", file=out) from None
    try:
        os.chmod(partial, 0o755)  # mkdtemp makes 0700; reports are for people and web servers
        yield partial
        _swap(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _swap(partial: Path, out: Path) -> None:
    """Put ``partial`` in the place of ``out``: two renames (the old folder aside first), then
    the old one removed. A kill between the renames leaves the previous report in its hidden
    ``old`` folder, which :func:`sweep` removes on the next run."""
    old = None
    if out.exists() or out.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
        os.replace(out, old / "report")
    try:
        os.replace(partial, out)
    except BaseException:
        if old is not None:  # put the previous report back
            os.replace(old / "report", out)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def report_errors(out: Path) -> Iterator[None]:
    """A report that cannot be written (a full disk, a folder removed under the run) is one
    line naming the report folder, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise HarnessError(f"cannot write the report: {_what(exc)}"
                           + (f" ({exc.filename})" if exc.filename else ""), file=out) from None
