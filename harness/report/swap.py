"""Replacing a report folder whole or not at all, and putting right what a killed run left.

Every file is written into a new hidden folder beside the report folder (same parent, so renames
stay on one file system): ``.NAME.partial-PID-RANDOM`` (:func:`staged`). Only when the report is
complete is it swapped in: the previous folder is renamed aside (``.NAME.old-PID-RANDOM/report``),
the new one renamed to NAME, the previous folder's other entries (those
:mod:`harness.report.ownership` says are not this tool's) moved across, the aside folder removed.
An interrupted run (Ctrl-C, SIGTERM, an exception) removes its partial folder and puts the
previous report back if it was already aside.
A run holds an OS file lock (``flock``) on ``.NAME.lock-PID-RANDOM`` while its hidden folders
exist: another run tells a live run's folders from a killed one's by that lock, not by the PID,
which names no process across PID namespaces (two containers sharing a workspace).
A SIGKILL cannot be caught: the next run into the same folder (:func:`recover`, called before
anything runs) removes a killed run's partial folder and **restores** a killed run's aside
folder: renamed back to NAME when the swap stopped between its renames, its other entries moved
across when it stopped after them. :func:`interrupted_note` says which of these states an
interrupted command left, so the CLI never claims "left as it was" when it is not.

:func:`check_writable` is called before anything runs: a report folder that cannot be created
(an existing file, a path under a file, a read-only or virtual file system, a name too long for
the file system, here or for any file the report writes) or that is not a report folder is bad
input, found in a second, not after the whole run.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from harness import safe_files
from harness.errors import HarnessError
from harness.report.folder import check_names, os_reason
from harness.report.ownership import owned_entries, write_marker, written_outputs

try:
    import fcntl
except ImportError:  # Windows: no flock; a PID tells whether a run is alive
    fcntl = None


# Hidden folders of a swap, and their recovery ----------------------------------------------------

def _hidden(out: Path, kind: str) -> re.Pattern[str]:
    """``.NAME.KIND-TOKEN``; TOKEN ``PID-RANDOM`` (group 1), PID (group 2)."""
    return re.compile(rf"^\.{re.escape(out.name)}\.{kind}-((\d+)-[A-Za-z0-9_]+)$")


def _lock_path(out: Path, token: str) -> Path:
    return out.parent / f".{out.name}.lock-{token}"


@contextlib.contextmanager
def _owner_lock(out: Path) -> Iterator[str]:
    """Hold an OS file lock (``flock``) on ``.NAME.lock-TOKEN`` beside ``out`` for the block,
    and yield TOKEN (``PID-RANDOM``), which names the block's hidden folders. Another run
    tells whether their owner is alive by the lock, not the PID: a PID says nothing across PID
    namespaces (two containers sharing a workspace), a lock held by a live process does, and
    the kernel releases it when that process dies, however it dies. The lock file is made
    under a temporary name and renamed once locked, so it is never seen unlocked."""
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    path = _lock_path(out, token)
    fd = None
    if fcntl is not None:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.locking-", dir=out.parent)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(tmp, path)
        except OSError:  # a file system without locks: the PID check alone, as before
            os.close(fd)
            fd = None
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    try:
        yield token
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.close(fd)


def _owner_alive(out: Path, token: str, pid: int) -> bool:
    """Whether the run that made the hidden folder of ``token`` is still going: its lock file
    is locked (:func:`_owner_lock`). A folder without one (a run of an earlier rnn-harness, or
    a file system without locks): its PID is alive."""
    path = _lock_path(out, token)
    if fcntl is None or path.is_symlink() or not path.is_file():
        return _pid_alive(pid)
    return _locked(path)  # held: its owner is alive, in whatever PID namespace


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process: alive
        return True
    return True


def _carry(previous: Path, out: Path) -> bool:
    """Move the entries of the previous report folder that this tool did not write into ``out``.
    True when nothing of the user's is left in ``previous``."""
    try:
        owned = owned_entries(previous)
    except HarnessError:
        owned = set()
    left = False
    for entry in previous.iterdir():
        if entry.name in owned:
            if entry.name == "outputs":
                left |= not _carry_outputs(previous, out)
            continue
        target = out / entry.name
        if target.exists() or target.is_symlink():
            left = True  # never replace what is there; keep the previous folder instead
            continue
        os.replace(entry, target)
    return not left


def _carry_outputs(previous: Path, out: Path) -> bool:
    """Move the files and links in the previous report's outputs/ that this tool did not
    write (:func:`written_outputs`: a user's notes, a model kept for later) into ``out``'s
    outputs/, as they are. True when nothing of the user's is left behind."""
    top = previous / "outputs"
    if top.is_symlink() or not top.is_dir():
        return True
    written = written_outputs(previous)
    left = False
    for where, dirs, files in os.walk(top):
        here = Path(where)
        links = [d for d in dirs if (here / d).is_symlink()]  # moved as links, never entered
        dirs[:] = [d for d in dirs if d not in links]
        for name in [*files, *links]:
            src = here / name
            rel = src.relative_to(top)
            if written is not None and rel.as_posix() in written and not src.is_symlink():
                continue
            target = out / "outputs" / rel
            if target.exists() or target.is_symlink():
                left = True  # never replace what is there; keep the previous folder instead
                continue
            safe_files.folder(target.parent, top=out)
            os.replace(src, target)
    return not left


def recover(out: Path) -> list[str]:
    """Clear up after runs into ``out`` that were killed (their process gone): a partial folder
    is removed; a previous report left aside is put back (renamed to ``out`` when there is none,
    else its user's entries moved into it). Runs still going are left alone. Returns a line per
    thing done."""
    out = Path(out)
    parent = out.parent
    done: list[str] = []
    if not parent.is_dir():
        return done
    partial, old = _hidden(out, "partial"), _hidden(out, "old")
    for entry in sorted(parent.iterdir(), key=lambda p: p.name):
        m = partial.match(entry.name) or old.match(entry.name)
        if (not m or _owner_alive(out, m.group(1), int(m.group(2))) or not entry.is_dir()
                or entry.is_symlink()):
            continue
        previous = entry / "report"
        if m.re is partial or not (previous.exists() or previous.is_symlink()):
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed {entry.name}, left by a killed run")
            continue
        if not (out.exists() or out.is_symlink()):
            os.replace(previous, out)
            done.append(f"restored the previous report from {entry.name}, left by a killed run")
        elif not _carry(previous, out):
            continue
        else:
            done.append(f"moved the rest of {entry.name} into {out.name}")
        shutil.rmtree(entry, ignore_errors=True)
    _remove_dead_locks(out)
    return done


def _remove_dead_locks(out: Path) -> None:
    """Remove the lock files of killed runs (nothing holds them) whose folders are gone, and
    the half-made lock files of runs killed while making one."""
    lock = _hidden(out, "lock")
    making = re.compile(rf"^\.{re.escape(out.name)}\.locking-[A-Za-z0-9_]+$")
    for entry in out.parent.iterdir():
        m = lock.match(entry.name)
        if m:
            token = m.group(1)
            if _owner_alive(out, token, int(m.group(2))) or any(
                    (out.parent / f".{out.name}.{kind}-{token}").exists()
                    for kind in ("partial", "old")):
                continue
        elif not making.match(entry.name) or _locked(entry):
            continue
        with contextlib.suppress(OSError):
            entry.unlink()


def _locked(path: Path) -> bool:
    """Whether another open file holds a lock on ``path`` (False where locks are unknown)."""
    if fcntl is None or path.is_symlink() or not path.is_file():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


# The state an interrupted command leaves ---------------------------------------------------------

_state: dict[str, object] = {}


def reset_state() -> None:
    _state.clear()


def _note(out: Path, state: str, where: Path | None = None) -> None:
    _state.update(out=out, state=state, where=where)


def interrupted_note() -> str:
    """What an interrupted command left, for its last line: true in every state of the swap."""
    out, state, where = _state.get("out"), _state.get("state"), _state.get("where")
    if state == "kept":
        return (f"nothing of this run was written; the earlier report in {out} is left as "
                "it was")
    if state == "aside":
        return (f"nothing of this run was written; the earlier report of {out} is in {where}, "
                f"which the next run into {out} puts back")
    if state == "replaced":
        extra = (f"; entries of the earlier folder not yet moved into it are in {where}, "
                 "which the next run into it moves across") if where else ""
        return f"the report in {out} was written before the interrupt{extra}"
    if state == "absent":
        return f"nothing of this run was written (there was no report in {out})"
    return "nothing of this run was written"


# Before the run: can the report be written there -------------------------------------------------

def check_writable(out: str | Path, option: str = "--out", names: Iterable[str] = ()) -> Path:
    """Refuse, as bad input, a report folder that cannot be written: an empty name, a link
    (:mod:`harness.safe_files`: never written through), an existing file, a path under a file,
    a folder whose parent is not writable (the new report is swapped in there), a folder that
    is not a report folder (:func:`owned_entries`), a name the file system cannot hold
    (:func:`check_names`, ``names``: paths the report writes). Puts back a previous report a
    killed run left aside (:func:`recover`); creates the missing parent folders; returns the
    path."""
    if str(out).strip() == "":
        raise HarnessError("expected a folder name, got an empty one", field=option)
    out = Path(out)
    if out.name in ("", ".", "..") or out.resolve() in (Path.cwd(), *Path.cwd().parents):
        raise HarnessError("the report folder would replace the current folder or one above "
                           "it; give a folder of its own", file=out, field=option)
    check_names(out, names, option)
    with contextlib.suppress(OSError):
        recover(out)
    if out.is_symlink():
        raise safe_files.link_error(out, option)
    if out.exists():
        if not out.is_dir():
            raise HarnessError("exists and is not a folder", file=out, field=option)
        owned_entries(out, option)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = Path(tempfile.mkdtemp(prefix=f".{out.name}.check-", dir=parent))
        try:
            (probe / "probe").write_bytes(b"x")
        finally:
            shutil.rmtree(probe, ignore_errors=True)
    except OSError as exc:
        raise HarnessError(f"cannot write a report here: {os_reason(exc)}", file=out,
                           field=option) from None
    _note(out, "kept" if out.exists() else "absent")
    return out


# Writing: staged, then swapped in ----------------------------------------------------------------

@contextlib.contextmanager
def staged(out: str | Path, option: str = "--out") -> Iterator[Path]:
    """Yield a new hidden folder beside ``out`` to write the whole report into; on leaving the
    block normally the marker is written and the folder replaces ``out`` (its entries this tool
    did not write carried over); on an exception (Ctrl-C, SIGTERM turned into one, a full disk)
    it is removed and ``out`` is left as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    recover(out)
    if out.is_symlink():
        raise safe_files.link_error(out, option)
    if out.exists() and not out.is_dir():
        raise HarnessError("exists and is not a folder", file=out, field=option)
    owned_entries(out, option)  # refused before anything is written
    _note(out, "kept" if out.exists() else "absent")
    with _owner_lock(out) as token:  # held until the swap is done: another run sees it alive
        partial = out.parent / f".{out.name}.partial-{token}"
        try:
            os.mkdir(partial, 0o700)
        except OSError as exc:
            raise HarnessError(f"cannot write a report here: {os_reason(exc)}", file=out) from None
        try:
            os.chmod(partial, 0o755)  # reports are for people and web servers
            yield partial
            write_marker(partial)
            _swap(partial, out, token)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise


def _swap(partial: Path, out: Path, token: str) -> None:
    """Put ``partial`` in the place of ``out``: the previous folder aside, the new one in its
    place, the previous folder's entries this tool did not write moved across, the rest removed.
    A kill at any point leaves what :func:`recover` puts right."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{token}"
        os.mkdir(old, 0o700)
        os.replace(out, old / "report")
        _note(out, "aside", old)
    try:
        os.replace(partial, out)
    except BaseException:
        if old is not None:  # put the previous report back
            os.replace(old / "report", out)
            shutil.rmtree(old, ignore_errors=True)
            _note(out, "kept")
        raise
    _note(out, "replaced", old)
    if old is not None and _carry(old / "report", out):
        _note(out, "replaced")  # what is left aside is this tool's: removed, or by recover()
        shutil.rmtree(old, ignore_errors=True)
    _note(out, "replaced")
