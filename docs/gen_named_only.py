"""Regenerate the lists of named-only adapters in README.md and docs/*.md from the registry.

Every span between ``<!-- generated: named-only -->`` and ``<!-- end generated: named-only -->``
is replaced by the adapters :func:`harness.adapters.named_only_adapters` gives (those left out
of the default selection, ``--adapters all``, and run when named or with ``--adapters every``),
in the registry's order. Run from the repository root:

    python docs/gen_named_only.py          # rewrite the files
    python docs/gen_named_only.py --check  # exit 1 when one is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "docs"):  # run from anywhere: this checkout's harness and _regenerate
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from _regenerate import regenerate_docs  # noqa: E402

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
    return regenerate_docs(argv, description=__doc__.splitlines()[0], docs=DOCS,
                           regenerate=regenerate, script="docs/gen_named_only.py")


if __name__ == "__main__":
    raise SystemExit(main())
