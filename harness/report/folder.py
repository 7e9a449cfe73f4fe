"""The report folder's contents: the files a report holds, their names (checked against the
file system before anything runs) and the writers of run.json, errors.log and outputs/.

**What a report folder holds** (:data:`FILES`, :data:`FOLDERS`): divergence.csv, summary.md,
layouts.md, run.json (a :class:`~harness.report.record.RunRecord`), errors.log (``== case::adapter``
sections), index.html with plots/, outputs/ (``--save-outputs``), repro/ (harness/repro/), and
the marker :data:`MARKER`, a small JSON file naming the entries this tool wrote there
(:mod:`harness.report.ownership`). ``diff --out`` into a report folder adds its file to the
marker's list (the nightly workflow's diff.md).

The folder is replaced whole or not at all by :mod:`harness.report.swap`, and read back by
:mod:`harness.report.read_back`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from harness import safe_files
from harness.errors import HarnessError
from harness.report.record import RunRecord

MARKER = ".rnn-harness-report"
FILES = ("divergence.csv", "summary.md", "layouts.md", "run.json", "errors.log", "index.html",
         "diff.md", MARKER)  # diff.md: `diff --out` into a report written before the marker
FOLDERS = ("plots", "outputs", "repro")
PLOT_SUFFIXES = ("", "-layers", "-grad", "-grad-blocks")  # harness.report.html's plots per pair


def os_reason(exc: OSError) -> str:
    """An OSError in words for an error line (its strerror, else its type)."""
    return exc.strerror or type(exc).__name__


def shown_name(name: str) -> str:
    """A file name for a terminal line: control characters (ESC) escaped."""
    return name if name.isprintable() else ascii(name)


def slug(text: str) -> str:
    """A name made safe for a file name or an HTML anchor."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def plot_stem(n: int, case: str, adapter: str, width: int = 3) -> str:
    """plots/<stem>*.png of the n-th pair in page order."""
    return f"{n:0{width}d}-{slug(case)}--{slug(adapter)}"


# The names a report writes, checked before the run -----------------------------------------------

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
            raise HarnessError(f"the report would write {shown_name(rel)!s}, a path longer "
                               f"than the file system allows ({path_max} bytes); give a shorter "
                               "folder", file=out, field=option)
    for part, whole in checks:
        size = len(os.fsencode(part))
        if size > name_max:
            what = "the folder's name" if whole == out.name else (
                "a hidden folder beside it" if whole.startswith(f".{out.name}.") else
                f"the file {shown_name(whole)}")
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


# Writing its files -------------------------------------------------------------------------------

@contextlib.contextmanager
def report_errors(out: Path) -> Iterator[None]:
    """A report that cannot be written (a full disk, a folder removed under the run) is one
    line naming the report folder, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise HarnessError(f"cannot write the report: {os_reason(exc)}"
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
