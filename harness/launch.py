"""The console entry point (``rnn-harness``, ``python -m harness``), kept light: a Ctrl-C while
the command's modules are imported (the first few tenths of a second: NumPy, pandas, pydantic,
the commands) ends as a later one does, exit 130 with one line, not a KeyboardInterrupt
traceback."""

from __future__ import annotations

import sys

INTERRUPTED = "rnn-harness: interrupted (SIGINT): nothing of this run was written"


def entry() -> None:
    try:
        from harness.cli import entry as run_command
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        raise SystemExit(130) from None
    run_command()
