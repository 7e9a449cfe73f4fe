"""The case files that ship with the harness: ``rnn-harness run`` with no CASES runs them,
``rnn-harness init DIR`` copies them out to edit.

In a checkout they are ``cases/`` beside the package; an installed package holds the same files
as the data-only package ``harness._cases`` (pyproject.toml maps it to ``cases/``), so no build
step copies anything and the checkout's tests and docs keep naming ``cases/...``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness import safe_files
from harness.errors import HarnessError

_HERE = Path(__file__).resolve().parent


def bundled_cases() -> Path:
    """The folder of bundled case files: installed, else the checkout's ``cases/``."""
    for folder in (_HERE / "_cases", _HERE.parent / "cases"):
        if folder.is_dir() and any(folder.glob("*.yaml")):
            return folder
    raise HarnessError("the bundled cases are missing from this installation (reinstall "
                       "rnn-harness)", file=str(_HERE / "_cases"))


def copy_bundled(dest: str | Path) -> list[Path]:
    """Copy the bundled case files (``*.yaml``, ``*.npz``, sub-folders) into ``dest``; refuse
    to overwrite a file that is there already, and never write through a link: a symlinked
    sub-folder or a dangling link inside ``dest`` would put files outside it. Returns the files
    written."""
    if str(dest).strip() == "":  # Path("") is the current folder: refused, as `--out ''` is
        raise HarnessError("expected a folder name, got an empty one", field="DIR")
    src = bundled_cases()
    dest = Path(dest)
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in (".yaml", ".npz"))
    targets = [dest / p.relative_to(src) for p in files]
    if dest.is_symlink():  # the folder written into: a link would put the files where it points
        raise safe_files.link_error(dest, "DIR")
    for target in targets:
        for part in [*reversed(target.relative_to(dest).parents[:-1]), target.relative_to(dest)]:
            if (dest / part).is_symlink():
                raise HarnessError(f"{dest / part} is a symbolic link; init writes only into "
                                   "folders and files of its own: choose an empty or new "
                                   "folder", file=str(dest))
    clash = [t for t in targets if os.path.lexists(t)]
    if clash:
        raise HarnessError(f"{len(clash)} file(s) exist already, e.g. {clash[0]}; choose an "
                           "empty or new folder", file=str(dest))
    written = []
    for p, target in zip(files, targets, strict=True):
        safe_files.folder(target.parent, top=dest, field="DIR")
        # O_EXCL | O_NOFOLLOW: a link planted since the check above is refused, not followed
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o644)
        with open(fd, "wb") as out, open(p, "rb") as f:
            shutil.copyfileobj(f, out)
        written.append(target)
    return written
