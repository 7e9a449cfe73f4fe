"""What the docs generators (gen_layouts.py, gen_adapters.py, gen_named_only.py) share: rewrite
the files whose generated spans are out of date, or with ``--check`` only say which are."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def regenerate_docs(argv: list[str] | None, *, description: str, docs: Sequence[Path],
                    regenerate: Callable[[str], str], script: str) -> int:
    """``regenerate`` each of ``docs``: written where it changes, or, with ``--check``, exit 1
    naming the stale files and the command (``script``) that rewrites them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        new = regenerate(text)
        if new == text:
            continue
        stale.append(str(doc.relative_to(ROOT)))
        if not args.check:
            doc.write_text(new, encoding="utf-8")
            print(f"rewrote {stale[-1]}")
    if stale and args.check:
        print(f"out of date: {', '.join(stale)} (run python {script})")
        return 1
    return 0
