"""Reading a report folder back (merge, diff, bisect, repro): run.json as a run record,
divergence.csv and errors.log, each validated and read no further than a size cap, since a report
folder may come from another job or from elsewhere."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from harness.errors import HarnessError
from harness.report.folder import os_reason
from harness.report.record import RunRecord

if TYPE_CHECKING:
    import pandas as pd

MAX_RUN_JSON = 64 * 2**20  # bytes; a run of 1000 cases with their specs is a few MB
# bytes of the other files read back from a report folder (merge, diff: folders of other jobs);
# the bundled cases' divergence.csv is about 1 MB with every CPU adapter, and pandas holds a
# file of this size in a few times as much memory
MAX_DIVERGENCE_CSV = 256 * 2**20
MAX_ERRORS_LOG = 64 * 2**20  # tracebacks, a few kB each


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
        raise HarnessError(f"cannot read: {os_reason(exc)}", file=path) from None
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
        raise HarnessError(f"cannot read: {os_reason(exc)}", file=path) from None
    if size > limit:
        raise HarnessError(f"larger than {limit // 2**20} MiB ({size} bytes); not read (a "
                           "report's file is far smaller)", file=path)
    return path


def read_errors(path: Path) -> dict[str, str]:
    """errors.log as :func:`harness.report.folder.write_errors` writes it (a link to elsewhere
    is not read; one larger than :data:`MAX_ERRORS_LOG` is refused)."""
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
        raise HarnessError(f"cannot read: {os_reason(exc)}", file=csv) from None
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
