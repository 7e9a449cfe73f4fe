"""The report folder: the one module that writes, recognises, replaces and reads it.

**What a report folder holds** (:data:`FILES`, :data:`FOLDERS`): divergence.csv, summary.md,
layouts.md, run.json (a :class:`~harness.report.record.RunRecord`), errors.log (``== case::adapter``
sections), index.html with plots/, outputs/ (``--save-outputs``), repro/ (harness/repro/), and
the marker :data:`MARKER`, a small JSON file naming the entries this tool wrote there. ``diff
--out`` into a report folder adds its file to the marker's list (the nightly workflow's
diff.md).

**Which folders ``--out`` may replace.** A report folder: one with the marker or, for reports
written before the marker, one whose run.json validates as a run record. In it, only the entries
this tool writes are replaced; anything else there (a user's notes, shard folders) is carried
over into the new report. Any other non-empty folder is refused with one line naming what it
holds: ``--out`` is never a way to delete a user's files.

**Whole or not at all.** Every file is written into a new hidden folder beside the report folder
(same parent, so renames stay on one file system): ``.NAME.partial-PID-RANDOM``. Only when the
report is complete is it swapped in: the previous folder is renamed aside
(``.NAME.old-PID-RANDOM/report``), the new one renamed to NAME, the previous folder's other
entries moved across, the aside folder removed. An interrupted run (Ctrl-C, SIGTERM, an
exception) removes its partial folder and puts the previous report back if it was already aside.
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
import io
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from harness import safe_files
from harness.errors import HarnessError
from harness.report.record import SCHEMA_VERSION, RunRecord

try:
    import fcntl
except ImportError:  # Windows: no flock; a PID tells whether a run is alive
    fcntl = None

if TYPE_CHECKING:
    import pandas as pd

MARKER = ".rnn-harness-report"
FILES = ("divergence.csv", "summary.md", "layouts.md", "run.json", "errors.log", "index.html",
         "diff.md", MARKER)  # diff.md: `diff --out` into a report written before the marker
FOLDERS = ("plots", "outputs", "repro")
PLOT_SUFFIXES = ("", "-layers", "-grad", "-grad-blocks")  # harness.report.html's plots per pair
MAX_RUN_JSON = 64 * 2**20  # bytes; a run of 1000 cases with their specs is a few MB
MAX_MARKER = 64 * 2**20  # the marker lists the files of outputs/ too: a line per pair and file
# bytes of the other files read back from a report folder (merge, diff: folders of other jobs);
# the bundled cases' divergence.csv is about 1 MB with every CPU adapter, and pandas holds a
# file of this size in a few times as much memory
MAX_DIVERGENCE_CSV = 256 * 2**20
MAX_ERRORS_LOG = 64 * 2**20  # tracebacks, a few kB each

_TOOL = "rnn-harness"


def _what(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _show(name: str) -> str:
    """A file name for a terminal line: control characters (ESC) escaped."""
    return name if name.isprintable() else ascii(name)


def slug(text: str) -> str:
    """A name made safe for a file name or an HTML anchor."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def plot_stem(n: int, case: str, adapter: str, width: int = 3) -> str:
    """plots/<stem>*.png of the n-th pair in page order."""
    return f"{n:0{width}d}-{slug(case)}--{slug(adapter)}"


# What this tool owns in a folder ---------------------------------------------------------------

def _plain(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name \
        and "\\" not in name and "\0" not in name


def _marker_entries(folder: Path) -> set[str] | None:
    """The entries the marker lists, or None when there is no marker of this tool."""
    doc = _marker_doc(folder)
    if doc is None:
        return None
    entries = doc.get("entries")
    return {e for e in entries if _plain(e)} if isinstance(entries, list) else set()


def owned_entries(folder: Path, option: str = "--out") -> set[str]:
    """The names in ``folder`` this tool wrote and a new report replaces; an empty set for a
    missing or empty folder. HarnessError for a folder that holds something and is not a report
    folder (no marker, no run.json that validates as a run record)."""
    try:
        entries = sorted(p.name for p in folder.iterdir())
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise HarnessError(f"cannot read the folder: {_what(exc)}", file=folder,
                           field=option) from None
    if not entries:
        return set()
    listed = _marker_entries(folder)
    if listed is not None:
        return set(FILES) | set(FOLDERS) | listed
    run = folder / "run.json"
    why = "no run.json"
    if run.is_file() and not run.is_symlink():
        try:
            read_run(run)
            return set(FILES) | set(FOLDERS)
        except HarnessError:
            why = "its run.json is not an rnn-harness run record"
    shown = ", ".join(_show(n) for n in entries[:5])
    more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    raise HarnessError(f"holds {shown}{more}, and is not a report folder ({why}, no {MARKER}); "
                       "a report replaces only a report folder: give a new or empty folder or "
                       "an earlier report's", file=folder, field=option)


def write_marker(folder: Path) -> None:
    """The marker, listing every entry now in ``folder`` and every file this tool wrote in its
    outputs/ (called last, before the swap): a user's files put in outputs/ later are told
    apart from them, and kept by the next report (:func:`_carry`)."""
    from harness.npz import write_text

    names = sorted({p.name for p in folder.iterdir() if not p.name.endswith(".tmp")} | {MARKER})
    doc = {"tool": _TOOL, "schema_version": SCHEMA_VERSION, "entries": names}
    top = folder / "outputs"
    if top.is_dir() and not top.is_symlink():
        doc["outputs"] = sorted(p.relative_to(top).as_posix() for p in top.rglob("*")
                                if p.is_file() and not p.name.endswith(".tmp"))
    write_text(folder / MARKER, json.dumps(doc, indent=1) + "\n")


def _marker_doc(folder: Path) -> dict | None:
    marker = folder / MARKER
    if marker.is_symlink() or not marker.is_file():
        return None
    try:
        if marker.stat().st_size > MAX_MARKER:
            return None
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("tool") == _TOOL else None


def written_outputs(folder: Path) -> set[str] | None:
    """The files (paths relative to outputs/) this tool wrote in ``folder``'s outputs/: as its
    marker lists them; for a report from before that list, the paths ``--save-outputs`` gives
    the pairs its run.json names (outputs/CASE/ADAPTER.*). None: nothing says which they are
    (no marker, no readable run.json): then outputs/ is left to the user, kept whole."""
    doc = _marker_doc(folder)
    listed = doc.get("outputs") if doc is not None else None
    if isinstance(listed, list):
        return {p for p in listed if isinstance(p, str)}
    try:
        run = read_run(folder / "run.json")
    except HarnessError:
        return None
    top = folder / "outputs"
    pairs = {(p.case, p.adapter) for p in run.pairs}
    return {f.relative_to(top).as_posix() for f in top.glob("*/*")
            if (f.parent.name, f.name.split(".")[0]) in pairs}


def add_entry(path: str | Path) -> None:
    """``diff --out FILE`` wrote FILE: when it lies in a report folder, the marker lists it (a
    report from before the marker gets one), so the next report into that folder replaces it
    with the rest instead of keeping it as the user's."""
    from harness.npz import write_text

    path = Path(path)
    folder = path.parent
    listed = _marker_entries(folder)
    if listed is None:
        if not (folder / "run.json").is_file():
            return
        try:
            owned = owned_entries(folder)
        except HarnessError:
            return  # not a report folder: the file is the user's
        listed = {p.name for p in folder.iterdir() if p.name in owned}
    if path.name in listed:
        return
    write_text(folder / MARKER, json.dumps({"tool": _TOOL, "schema_version": SCHEMA_VERSION,
                                            "entries": sorted(listed | {path.name, MARKER})},
                                           indent=1) + "\n")


# Hidden folders of a swap, and their recovery ---------------------------------------------------

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


# The state an interrupted command leaves -------------------------------------------------------

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


# Before the run: can the report be written there ------------------------------------------------

def _limits(parent: Path) -> tuple[int, int]:
    def conf(name: str, default: int) -> int:
        try:
            value = os.pathconf(parent, name)
        except (OSError, ValueError, AttributeError):
            return default
        return value if value and value > 0 else default

    return conf("PC_NAME_MAX", 255), conf("PC_PATH_MAX", 4096)


def report_names(pairs: Iterable[tuple[str, str]], outputs: bool = False,
                 models: dict[str, tuple[str, ...]] | None = None) -> list[str]:
    """Every path (relative to the report folder) a report of these case x adapter pairs may
    write, for :func:`check_names`; ``models``: adapter -> suffixes of the model files it
    saves (``Adapter.saved_models``)."""
    pairs = list(pairs)
    width = max(3, len(str(len(pairs))))
    names = [*FILES, *FOLDERS]
    for n, (case, adapter) in enumerate(pairs, 1):
        names += [f"plots/{plot_stem(n, case, adapter, width)}{s}.png" for s in PLOT_SUFFIXES]
        if outputs:
            names += [f"outputs/{case}/{adapter}.{suffix}"
                      for suffix in ("npz", *(models or {}).get(adapter, ()))]
    return names


def check_names(out: Path, names: Iterable[str] = (), option: str = "--out") -> None:
    """Refuse a report folder whose name, hidden siblings or any of ``names`` (paths inside it)
    the file system cannot hold: too long a name, or too long a path."""
    out = Path(out)
    parent = out.parent if out.parent.is_dir() else Path(os.path.abspath(out)).parent
    while not parent.is_dir() and parent != parent.parent:
        parent = parent.parent
    name_max, path_max = _limits(parent)
    big_pid = "9" * max(7, len(str(os.getpid())))
    partial = f".{out.name}.partial-{big_pid}-{'x' * 8}"
    base = len(os.fsencode(os.path.abspath(out.parent)))
    checks = [(out.name, out.name)] + [(h, h) for h in (
        partial, f".{out.name}.old-{big_pid}-{'x' * 8}", f".{out.name}.check-{'x' * 8}")]
    for rel in names:
        for part in rel.split("/"):
            checks.append((part, rel))
        if base + 1 + len(os.fsencode(partial)) + 1 + len(os.fsencode(rel)) > path_max:
            raise HarnessError(f"the report would write {_show(rel)!s}, a path longer than the "
                               f"file system allows ({path_max} bytes); give a shorter folder",
                               file=out, field=option)
    for part, whole in checks:
        size = len(os.fsencode(part))
        if size > name_max:
            what = "the folder's name" if whole == out.name else (
                "a hidden folder beside it" if whole.startswith(f".{out.name}.") else
                f"the file {_show(whole)}")
            raise HarnessError(f"name too long for the file system: {what} would be {size} "
                               f"bytes, at most {name_max}; give a shorter folder (or case "
                               "names)", file=out, field=option)


def merge_folders(folders: list[str], out: str | None) -> tuple[str, str, list[str]]:
    """``merge``'s report folder, the option that named it (for error lines) and the shards'
    folders: with ``--out M`` (as ``run`` and ``diff`` take it) every positional folder is a
    shard; without it the first positional is the report folder (``merge M A B``, the nightly
    workflow's form)."""
    if out is not None:
        return out, "--out", list(folders)
    if len(folders) < 2:
        raise HarnessError("expected the merged report folder and at least one shard folder: "
                           "`merge --out M A B` or `merge M A B`", field="OUT_DIR")
    return folders[0], "OUT_DIR", list(folders[1:])


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
        raise HarnessError(f"cannot write a report here: {_what(exc)}", file=out,
                           field=option) from None
    _note(out, "kept" if out.exists() else "absent")
    return out


# Writing: staged, then swapped in --------------------------------------------------------------

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
            raise HarnessError(f"cannot write a report here: {_what(exc)}", file=out) from None
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


@contextlib.contextmanager
def report_errors(out: Path) -> Iterator[None]:
    """A report that cannot be written (a full disk, a folder removed under the run) is one
    line naming the report folder, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise HarnessError(f"cannot write the report: {_what(exc)}"
                           + (f" ({exc.filename})" if exc.filename else ""), file=out) from None


def write_run(folder: Path, record: RunRecord) -> None:
    from harness.npz import write_text

    doc = record.model_dump(mode="json", exclude_unset=True)
    write_text(folder / "run.json", json.dumps(doc, indent=2, default=str) + "\n")


def write_errors(folder: Path, details: Iterable[tuple[str, str]]) -> None:
    """errors.log: a ``== case::adapter`` section per (pair id, traceback); none: no file."""
    from harness.npz import write_text

    details = [(pid, text) for pid, text in details if text]
    if details:
        write_text(folder / "errors.log", "\n".join(f"== {pid}\n{text}" for pid, text in details))


def copy_outputs(source: Path, target: Path) -> None:
    """``source/outputs`` into ``target/outputs``: only regular files that live inside
    ``source``. A symlink (to a file or a folder) is skipped, and so is a file with other hard
    links: a report folder from elsewhere must not copy in what lies outside it."""
    import stat

    top = source / "outputs"
    if top.is_symlink() or not top.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
        for name in filenames:
            src = here / name
            try:  # O_NOFOLLOW: a file swapped for a link after the walk is not followed either
                fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            with os.fdopen(fd, "rb") as f:
                info = os.fstat(f.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                    continue
                dst = target / "outputs" / src.relative_to(top)
                with safe_files.created(dst, target) as out:
                    shutil.copyfileobj(f, out)


# Reading --------------------------------------------------------------------------------------

@dataclass
class ReportFolder:
    """A report folder as read: its run record, divergence.csv (as the text written, and typed
    like harness.compare.divergence's rows) and errors.log."""

    folder: Path
    run: RunRecord
    text: pd.DataFrame  # every cell the string written
    rows: pd.DataFrame  # numbers as numbers; direction and t nullable integers
    errors: dict[str, str]  # pair id -> traceback


def _regular(path: Path, what: str) -> Path:
    """A file of the report folder: a regular file in it, never a link to elsewhere."""
    if path.is_symlink():
        raise HarnessError(f"not a report folder ({what} is a symbolic link; a report's files "
                           "are regular files)", file=path)
    if not path.is_file():
        raise HarnessError(f"not a report folder (missing {what})", file=path)
    return path


def read_run(path: str | Path) -> RunRecord:
    """run.json as a run record, or HarnessError naming the file and the first field that is not
    one."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_RUN_JSON:
            raise HarnessError(f"larger than {MAX_RUN_JSON // 2**20} MiB; not a run record",
                               file=path)
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise HarnessError(f"cannot read: {_what(exc)}", file=path) from None
    except ValueError as exc:
        raise HarnessError(f"unreadable ({str(exc).splitlines()[0][:200]})", file=path) from None
    if not isinstance(doc, dict):
        raise HarnessError(f"expected a JSON object, got {type(doc).__name__}", file=path)
    try:
        return RunRecord.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise HarnessError(f"{msg[:200]} ({exc.error_count()} error(s))", file=path,
                           field=where.replace(".[", "[") or None) from None


def _capped(path: Path, limit: int) -> Path:
    """``path``, refused when larger than ``limit`` bytes: a file of another job's report
    folder is read whole, so its size is checked first."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise HarnessError(f"cannot read: {_what(exc)}", file=path) from None
    if size > limit:
        raise HarnessError(f"larger than {limit // 2**20} MiB ({size} bytes); not read (a "
                           "report's file is far smaller)", file=path)
    return path


def read_errors(path: Path) -> dict[str, str]:
    """errors.log as :func:`write_errors` writes it (a link to elsewhere is not read; one
    larger than :data:`MAX_ERRORS_LOG` is refused)."""
    if path.is_symlink() or not path.is_file():
        return {}
    _capped(path, MAX_ERRORS_LOG)
    with open(path, encoding="utf-8", errors="replace") as f:
        # tracebacks from anywhere: undecodable bytes are shown, not fatal; read no more than
        # the cap even where the file grew since
        text = f.read(MAX_ERRORS_LOG + 1)
    if len(text) > MAX_ERRORS_LOG:
        raise HarnessError(f"larger than {MAX_ERRORS_LOG // 2**20} MiB; not read", file=path)
    parts = re.split(r"(?m)^== (.+)\n", text)
    details = {}
    for k in range(1, len(parts), 2):
        text = parts[k + 1]
        if k + 2 < len(parts) and text.endswith("\n"):  # the separator write_errors joins with
            text = text[:-1]
        details[parts[k]] = text
    return details


def _check_numeric(rows: pd.DataFrame, csv: Path, columns: Iterable[str]) -> None:
    import pandas as pd

    for c in columns:
        if c not in rows.columns or pd.api.types.is_numeric_dtype(rows[c]):
            continue
        bad = pd.to_numeric(rows[c], errors="coerce").isna() & rows[c].notna()
        if bad.any():
            raise HarnessError(f"expected numbers, got {str(rows[c][bad].iloc[0])[:40]!r}",
                               file=csv, field=c)


def read_report(folder: str | Path) -> ReportFolder:
    """A report folder of this or an earlier rnn-harness, validated: HarnessError naming the file
    (and field) of the first thing that is not as written."""
    import pandas as pd

    from harness import compare

    folder = Path(folder)
    if not folder.is_dir():
        raise HarnessError("report folder not found", file=folder)
    csv = _capped(_regular(folder / "divergence.csv", "divergence.csv"), MAX_DIVERGENCE_CSV)
    run = read_run(_regular(folder / "run.json", "run.json"))
    try:
        with open(csv, "rb") as f:  # read once, no more than the cap (the file may grow)
            data = f.read(MAX_DIVERGENCE_CSV + 1)
        if len(data) > MAX_DIVERGENCE_CSV:
            raise HarnessError(f"larger than {MAX_DIVERGENCE_CSV // 2**20} MiB; not read",
                               file=csv)
        text = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
        rows = pd.read_csv(io.BytesIO(data), dtype={"case": str, "adapter": str,
                                                    "output": str, "verdict": str})
    except OSError as exc:
        raise HarnessError(f"cannot read: {_what(exc)}", file=csv) from None
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise HarnessError(f"unreadable ({str(exc).splitlines()[0][:200]})", file=csv) from None
    if not {"case", "adapter"} <= set(text.columns):
        raise HarnessError("columns missing: case, adapter", file=csv)
    _check_numeric(rows, csv, ("layer", "direction", "t", *compare.METRICS))
    for c in ("direction", "t"):  # nullable, as harness.compare writes them
        if c in rows.columns:
            rows[c] = rows[c].astype("Int64")
    for frame in (text, rows):  # reports from before step mode: every row free-running
        if "mode" not in frame.columns:
            frame.insert(frame.columns.get_loc("adapter") + 1, "mode", compare.FREE)
    return ReportFolder(folder, run, text, rows, read_errors(folder / "errors.log"))
