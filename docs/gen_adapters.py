"""Regenerate docs/adapters.md's adapter table from the registry.

The table between ``<!-- generated: adapters -->`` and ``<!-- end generated: adapters -->``
has a row per adapter family: its adapters, their device and whether each is in the default
selection (or the baseline) come from the registry (:data:`harness.adapters.ADAPTERS`); what
the row says each calls is the doc's own text, kept. A registered adapter without a row gets
one, whose text asks for a description; a name in a row that the registry does not hold, or a
row whose adapters run on different devices, stops the generator.

The known-bug table (``<!-- generated: known-bugs -->``) is the registry's
(:data:`harness.known_bugs.KNOWN_BUGS`): a row per bug, its adapters, the releases it was seen
on, the first release that fixes it and what ``rnn-harness bisect`` tried. The line of the
framework versions last checked (``<!-- generated: checked-versions -->``, here and in
README.md) is written only with ``--record-versions``: the installed release of every
distribution an adapter requires, and the day; run it after the test suite passed on those
versions. Otherwise it is kept as it is, unless the adapters' distributions changed. Run from the
repository root:

    python docs/gen_adapters.py          # rewrite docs/adapters.md (and README.md's line)
    python docs/gen_adapters.py --check  # exit 1 when it is out of date (or wrong)
    python docs/gen_adapters.py --record-versions  # also record the installed versions, today
"""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "docs"):  # run from anywhere: this checkout's harness and _regenerate
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _regenerate import regenerate_docs  # noqa: E402

from harness import known_bugs, versions  # noqa: E402
from harness.adapters import ADAPTERS  # noqa: E402

DOC = ROOT / "docs" / "adapters.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"(?P<start><!-- generated: adapters -->\n)(?P<body>.*?)"
                   r"(?P<end><!-- end generated: adapters -->)", re.S)
HEADER = ("| adapter | device | selection | framework call |\n"
          "|---|---|---|---|\n")
UNDESCRIBED = "(not described yet: say what it calls, and what it cannot run)"
# the selection column: in the default selection (`--adapters all`), run only when named, or
# the baseline every pair is compared with
DEFAULT, WHEN_NAMED, BASELINE = "default", "when named", "baseline"


BUGS = re.compile(r"(?P<start><!-- generated: known-bugs -->\n)(?P<body>.*?)"
                  r"(?P<end><!-- end generated: known-bugs -->)", re.S)
BUG_HEADER = ("| upstream | adapters | seen on | fixed in | bisect tried |\n"
              "|---|---|---|---|---|\n")
CHECKED = re.compile(r"(?P<start><!-- generated: checked-versions -->)(?P<body>.*?)"
                     r"(?P<end><!-- end generated: checked-versions -->)", re.S)
CHECKED_SAYS = re.compile(r"^Framework versions last checked \((?P<day>\d{4}-\d\d-\d\d)\): "
                          r"(?P<listed>.*)\.$")


class StaleTable(Exception):
    """A row names an adapter the registry does not hold, or adapters of two devices."""


def _rows(body: str) -> list[tuple[list[str], str]]:
    """The table's rows as (adapter names, framework call text: the last column, whole)."""
    lines = body.splitlines()
    columns = lines[0].count(" | ") + 1 if lines and lines[0].startswith("| ") else 0
    rows = []
    for line in lines:
        if not line.startswith("| `"):
            continue
        cells = line.strip().removeprefix("| ").removesuffix(" |").split(" | ")
        names = re.findall(r"`([^`]+)`", cells[0])
        rows.append((names, " | ".join(cells[columns - 1:]).strip()))
    return rows


def _selection(names: list[str]) -> str:
    if all(ADAPTERS[n].baseline for n in names):
        return BASELINE
    named = [n for n in names if ADAPTERS[n].named_only is not None]
    if not named:
        return DEFAULT
    if len(named) == len(names):
        return WHEN_NAMED
    return ", ".join(f"`{n}` {WHEN_NAMED if n in named else DEFAULT}" for n in names)


def _row(names: list[str], text: str) -> str:
    devices = {ADAPTERS[n].device for n in names}
    if len(devices) != 1:
        raise StaleTable(f"docs/adapters.md: the row of {', '.join(names)} mixes devices "
                         f"{sorted(devices)}: give each device its row")
    listed = ", ".join(f"`{n}`" for n in names)
    return f"| {listed} | {devices.pop().upper()} | {_selection(names)} | {text} |\n"


def table(body: str) -> str:
    """The table the registry gives, over the rows' texts of ``body``."""
    rows = _rows(body)
    unknown = [n for names, _ in rows for n in names if n not in ADAPTERS]
    if unknown:
        raise StaleTable(f"docs/adapters.md names adapters the registry does not hold: "
                         f"{', '.join(unknown)}")
    described = {n for names, _ in rows for n in names}
    rows += [([n], UNDESCRIBED) for n in ADAPTERS if n not in described]
    return HEADER + "".join(_row(names, text) for names, text in rows)


def regenerate(text: str) -> str:
    """``text`` with its adapter table replaced by what the registry gives now."""
    if not BLOCK.search(text):
        raise StaleTable("docs/adapters.md has no <!-- generated: adapters --> span")
    return BLOCK.sub(lambda m: m["start"] + table(m["body"]) + m["end"], text)


def bug_table() -> str:
    """The known-bug table: a row per upstream bug and what was measured of it, its adapters
    together where their entries record the same."""
    rows: dict[tuple[str, ...], list[str]] = {}
    for b in known_bugs.KNOWN_BUGS:
        cells = (b.upstream, b.seen_text(), b.fixed_text(), b.tried_text())
        rows.setdefault(cells, []).append(b.adapter)
    return BUG_HEADER + "".join(
        f"| {upstream} | {', '.join(f'`{n}`' for n in names)} | {seen} | {fixed} | {tried} |\n"
        for (upstream, seen, fixed, tried), names in rows.items())


def distributions() -> list[str]:
    """Every distribution an adapter requires, sorted."""
    return sorted({d for a in ADAPTERS.values() for d in a.requires})


def checked_line(day: str | None = None) -> str:
    """The line of the installed releases of :func:`distributions`, dated ``day`` (today)."""
    listed = ", ".join(f"{d} {versions.installed(d) or '(not installed)'}"
                       for d in distributions())
    day = day or datetime.date.today().isoformat()
    return f"Framework versions last checked ({day}): {listed}."


def checked(body: str, record: bool) -> str:
    """The versions line: recorded now, or kept where it names the adapters' distributions."""
    said = CHECKED_SAYS.match(body)
    if record or said is None:
        return checked_line()
    names = [item.split(" ", 1)[0] for item in said["listed"].split(", ")]
    return body if names == distributions() else checked_line()


def regenerate_with(text: str, record: bool) -> str:
    """``text`` with its generated spans as the registry gives them now: the adapter and
    known-bug tables where it holds the first (docs/adapters.md), and the versions line."""
    if BLOCK.search(text):
        if not BUGS.search(text):
            raise StaleTable("docs/adapters.md has no <!-- generated: known-bugs --> span")
        text = BUGS.sub(lambda m: m["start"] + bug_table() + m["end"], regenerate(text))
    if not CHECKED.search(text):
        raise StaleTable("no <!-- generated: checked-versions --> span in the file")
    return CHECKED.sub(lambda m: m["start"] + checked(m["body"], record) + m["end"], text)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    record = "--record-versions" in argv
    if record:
        argv.remove("--record-versions")
    try:
        return regenerate_docs(argv, description=__doc__.splitlines()[0], docs=[DOC, README],
                               regenerate=lambda text: regenerate_with(text, record),
                               script="docs/gen_adapters.py")
    except StaleTable as exc:
        print(exc)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
