"""The project's exception types, raised at the boundary (case files, weight files, CLI).

Each carries the offending file, the field (and line, where YAML gives one) and what was
expected, and renders as one line:
``cases/x.yaml:12: hidden_size: expected an integer >= 1, got 0``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

# C0 and C1 control characters: an ESC in a file name must not reach the terminal as one
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with newlines as spaces and every other control character escaped (``\\x1b``),
    so that a hostile file name cannot move the cursor or recolour a terminal."""
    text = text.replace("\n", " ")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def whole_sentences(text: str, limit: int = 300) -> str:
    """The first sentences of a library's message that fit in ``limit`` characters, whole:
    at least the first one, cut at a word with "..." only where it alone is longer."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    kept = sentences[0]
    for more in sentences[1:]:
        if len(kept) + 1 + len(more) > limit:
            break
        kept = f"{kept} {more}"
    if len(kept) > limit:
        kept = kept[:limit].rsplit(" ", 1)[0] + " ..."
    return kept


def printable_lines(text: str) -> str:
    """``text`` with its lines kept and every other control character escaped (``\\x1b``): a
    Markdown document (summary.md, ``diff``) whose cells come from a run.json that may have
    been edited (reasons, versions, platform, upstream ids), for the terminal and for files
    that are read on one."""
    return "\n".join(printable(line) for line in text.split("\n"))


class HarnessError(Exception):
    """Bad input. The CLI prints ``str(err)`` as one line and exits with code 2. ``also``: the
    input's other mistakes found at the same time, each named after this one (``; ``)."""

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        line: int | None = None,
        also: Sequence[HarnessError] = (),
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.line = line
        self.also = tuple(also)
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        field = f"{self.field}: " if self.field else ""
        return "; ".join([printable(f"{where}{field}{self.message}"), *map(str, self.also)])


class CaseError(HarnessError):
    """A case file that cannot be read, parsed or validated."""


class WeightsError(HarnessError):
    """A weight or data file that is missing tensors, has wrong shapes, or cannot be read."""


class KnownUpstreamCrash(Exception):
    """An adapter's framework crashed in a way declared as an open upstream bug (the adapter's
    data, e.g. the converter's process dying with SIGSEGV): the pair is a known upstream bug,
    not a failed run; ``upstream`` names the bug."""

    def __init__(self, message: str, upstream: str) -> None:
        super().__init__(message)
        self.upstream = upstream


class KnownCrashGone(KnownUpstreamCrash):
    """A crash declared as an upstream bug did not come (the converter converted the model):
    the pair "looks fixed", which fails a run, so that the declaration is revisited."""


class NotApplicable(Exception):
    """A case needs a capability the adapter lacks; ``str(err)`` is the reason shown in reports."""


class Unavailable(Exception):
    """The adapter cannot run here (framework missing, no GPU); ``str(err)`` says why."""
