"""Regenerate the lists of named-only adapters in README.md and docs/*.md from the registry.

Every span between ``<!-- generated: named-only -->`` and ``<!-- end generated: named-only -->``
is replaced by the adapters :func:`harness.adapters.named_only_adapters` gives (those left out
of the default selection, ``--adapters all``, and run when named or with ``--adapters every``),
in the registry's order. Run from the repository root:

    python docs/gen_named_only.py          # rewrite the files
    python docs/gen_named_only.py --check  # exit 1 when one is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: import this checkout's harness
    sys.path.insert(0, str(ROOT))

from harness.adapters import named_only_adapters  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?P<start><!-- generated: named-only -->)(?P<body>.*?)"
                   r"(?P<end><!-- end generated: named-only -->)", re.S)


def listed() -> str:
    """The named-only adapters as the docs list them: ```a`, `b`, `c```."""
    return ", ".join(f"`{name}`" for name in named_only_adapters())


def regenerate(text: str) -> str:
    """``text`` with every generated list replaced by what the registry gives now."""
    return BLOCK.sub(lambda m: m["start"] + listed() + m["end"], text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        new = regenerate(text)
        if new != text:
            stale.append(doc.relative_to(ROOT))
            if not args.check:
                doc.write_text(new, encoding="utf-8")
    if stale and args.check:
        print(f"out of date: {', '.join(map(str, stale))} (run python docs/gen_named_only.py)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
