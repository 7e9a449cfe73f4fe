"""What this tool owns in a folder: the marker (:data:`~harness.report.folder.MARKER`) naming
the entries a report wrote, and which entries of an existing folder a new report replaces.

**Which folders ``--out`` may replace.** A report folder: one with the marker or, for reports
written before the marker, one whose run.json validates as a run record. In it, only the entries
this tool writes are replaced; anything else there (a user's notes, shard folders) is carried
over into the new report (:mod:`harness.report.swap`). Any other non-empty folder is refused with
one line naming what it holds: ``--out`` is never a way to delete a user's files.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.errors import HarnessError
from harness.report.folder import FILES, FOLDERS, MARKER, os_reason, shown_name
from harness.report.read_back import read_run
from harness.report.record import SCHEMA_VERSION

MAX_MARKER = 64 * 2**20  # the marker lists the files of outputs/ too: a line per pair and file
_TOOL = "rnn-harness"


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
        raise HarnessError(f"cannot read the folder: {os_reason(exc)}", file=folder,
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
    shown = ", ".join(shown_name(n) for n in entries[:5])
    more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    raise HarnessError(f"holds {shown}{more}, and is not a report folder ({why}, no {MARKER}); "
                       "a report replaces only a report folder: give a new or empty folder or "
                       "an earlier report's", file=folder, field=option)


def write_marker(folder: Path) -> None:
    """The marker, listing every entry now in ``folder`` and every file this tool wrote in its
    outputs/ (called last, before the swap): a user's files put in outputs/ later are told
    apart from them, and kept by the next report (:mod:`harness.report.swap`)."""
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
