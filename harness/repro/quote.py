"""Strings put into the files a reproducer folder holds (``repro.py``, ``README.md``), as data
and never as source text or markup.

A case's name, an adapter's, a path, a reason, an upstream id, a version come from case files,
reports and the file system: anyone may have written them. In a generated script they go in as
Python literals (:func:`py_literal`) or, in its docstring or a comment, as one inert line
(:func:`doc_text`); in a README as text or a code span that cannot open Markdown structure
(:func:`md_text`, :func:`md_code`).
"""

from __future__ import annotations

import json
import math
from typing import Any


def py_literal(value: Any) -> str:
    """A Python expression that evaluates to ``value``, a JSON-like value (tuples become lists,
    keys strings, as through JSON); a non-finite float as ``float('nan')`` / ``float('inf')``,
    which need no import."""
    return _literal(json.loads(json.dumps(value)))


def _literal(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return ("float('nan')" if math.isnan(v) else
                "float('inf')" if v > 0 else "-float('inf')")
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(x)}" for k, x in v.items()) + "}"
    assert v is None or isinstance(v, (bool, int, float, str)), type(v)
    return repr(v)  # a str's repr escapes quotes, backslashes and every unprintable character


def _escaped(text: str) -> str:
    """``text`` with every unprintable character (line breaks, U+2028, NUL, a lone surrogate)
    as its Python escape, backslashes doubled: the inside of its ``repr``."""
    return repr(str(text))[1:-1]


def doc_text(text: object) -> str:
    """``text`` as one line safe inside a ``\"\"\"`` docstring and after a ``#``: no line break
    of any kind, every backslash and double quote escaped (it cannot end the string or start
    an escape of its own); the docstring reads back the text as given."""
    # repr escapes backslashes and unprintables, and a ' only where it chose ' as its quote
    return _escaped(str(text)).replace('"', '\\"')


_MD_SPECIAL = set("\\`*_[]<>|~&")


def md_text(text: object) -> str:
    """``text`` as one line of Markdown that renders as itself: no line break (each shown as
    its escape, e.g. ``\\n``), and every character that could start emphasis, a link, HTML
    or a table cell backslash-escaped, and a ``#`` that could open or close a heading (one
    after a space; owner/repo#N stays as it is)."""
    text = str(text)

    def special(i: int, c: str) -> bool:
        return c in _MD_SPECIAL or (c == "#" and (i == 0 or text[i - 1].isspace()))

    escaped = "".join("\\" + c if special(i, c) else c for i, c in enumerate(text))
    return "".join(c if c.isprintable() else _escaped(c) for c in escaped)


def md_code(text: object) -> str:
    """``text`` as one Markdown code span: one line (unprintables as their escapes), fenced by
    more backticks than any run of them inside it."""
    body = "".join(c if c.isprintable() else _escaped(c) for c in str(text))
    run = longest = 0
    for c in body:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    if body[:1] in ("`", " ") or body[-1:] in ("`", " "):
        body = f" {body} "  # CommonMark strips one space from each side
    return f"{fence}{body}{fence}"
