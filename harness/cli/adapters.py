"""``rnn-harness adapters``: the adapters, whether each can run here, and their capabilities."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import TYPE_CHECKING

from harness.cli.options import format_option
from harness.known_bugs import for_adapter, link

if TYPE_CHECKING:
    from harness.adapters.base import Capabilities


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    a = commands.add_parser("adapters", help="list adapters, availability and capabilities")
    a.add_argument("--json", action="store_true", help="same as --format json")
    a.add_argument("--check", action="store_true",
                   help="import each framework and check it can run here (GPU, converters): "
                        "tens of seconds; default: from the installed packages alone")
    format_option(a, "text")
    return a


_FEATURES = ("peepholes", "projection", "cell_clip", "proj_clip", "gate_clip", "input_forget",
             "variable_lengths")


def features_column(caps: Capabilities) -> str:
    """The features column: the boolean capabilities an adapter has, then ``gradients``, with the
    case features its backward pass is not compared for (``gradient_reasons``) in brackets."""
    names = [k for k in _FEATURES if getattr(caps, k) is True]
    if caps.gradients:
        excluded = " or ".join(sorted(caps.gradient_reasons))
        names.append(f"gradients (not with {excluded})" if excluded else "gradients")
    return ",".join(names)


WIDTH = 120  # the text output's widest line: long reasons and lists are wrapped
_SHORT = {"forward": "fwd", "bidirectional": "bi", "float64": "f64", "float32": "f32",
          "float16": "f16", "bfloat16": "bf16"}


def _short(listed: str) -> str:
    return ",".join(_SHORT.get(v, v) for v in listed.split(","))


def handle(args: argparse.Namespace) -> int:
    from harness.adapters import ADAPTERS
    from harness.adapters.base import installed_reason
    from harness.isolation import unavailable_reason

    # asked once: an own-process adapter's is asked of a worker it starts
    reasons = {name: unavailable_reason(a) if args.check else installed_reason(a)
               for name, a in ADAPTERS.items()}
    if args.json or args.format == "json":
        print(json.dumps({a.name: {"available": reasons[a.name] is None,
                                   "checked": args.check,  # False: from the installed packages
                                   "reason": reasons[a.name], "device": a.device,
                                   "layout": a.layout_name, "named_only": a.named_only,
                                   "capabilities": a.capabilities.table(),
                                   "known_bugs": [b.measured() for b in for_adapter(a.name)]}
                          for a in ADAPTERS.values()}, indent=2))
        return 0
    print(_text(ADAPTERS, reasons, args.check))
    return 0


def _text(adapters: dict, reasons: dict[str, str | None], checked: bool) -> str:
    """Two tables (where each adapter runs; what it runs), then the notes, within WIDTH."""

    def state(a) -> str:
        reason = reasons[a.name]
        if reason is not None:
            return f"no: {reason}"
        return "yes" if checked or a.device == "cpu" else "installed (--check looks for a GPU)"

    where = [[a.name, a.device, state(a), a.layout_name or "-"] for a in adapters.values()]
    what = []
    for a in adapters.values():
        caps = a.capabilities.table()
        what.append([a.name, caps["cells"], _short(caps["directions"]), _short(caps["dtypes"]),
                     features_column(a.capabilities).replace(",", ", ")])
    parts = [_fit(where, ["adapter", "device", "available" if checked else "installed",
                          "layout"], wrapped=2),
             _fit(what, ["adapter", "cells", "directions", "dtypes", "features"], wrapped=4)]
    if not checked:
        parts.append("From the installed packages; --check imports each framework and checks "
                     "that it can run here.")
    notes = [f"{a.name} with {feature}: {why}" for a in adapters.values()
             if a.capabilities.gradients
             for feature, why in sorted(a.capabilities.gradient_reasons.items())]
    if notes:
        parts.append("Gradients not compared (forward only) for cases with these features:\n"
                     + "\n".join(_wrap(n) for n in notes))
    bugs = [f"{b.adapter}: {b.upstream} ({link(b.upstream)}), {b.summary}; shows on {b.where}; "
            f"from {', '.join(f'{d} {v}' for d, v in b.since.items())}; seen on {b.seen_text()}; "
            f"fixed in {b.fixed_text()}; bisect tried: {b.tried_text()}"
            for a in adapters.values() for b in for_adapter(a.name)]
    if bugs:
        parts.append("Known upstream bugs (harness/known_bugs.py): a pair they explain does not "
                     "fail a run:\n" + "\n".join(_wrap(b) for b in bugs))
    named_only = [f"{a.name}: run when named: {a.named_only}" for a in adapters.values()
                  if a.named_only is not None]
    if named_only:
        parts.append("Left out of the default selection (--adapters all) and run when named: "
                     "in --adapters, in a case's adapters:,\nor all at once with --adapters "
                     "every:\n" + "\n".join(_wrap(n) for n in named_only))
    return "\n\n".join(parts)


def _wrap(line: str) -> str:
    return textwrap.fill(line, WIDTH, initial_indent="  ", subsequent_indent="    ")


def _fit(rows: list[list[str]], headers: list[str], wrapped: int) -> str:
    """The table with column ``wrapped`` wrapped as wide as :data:`WIDTH` leaves it (the other
    columns as wide as their longest cell)."""
    other = sum(max(len(str(r[k])) for r in [headers, *rows]) for k in range(len(headers))
                if k != wrapped)
    width = max(WIDTH - other - 3 * len(headers) - 1, 16)
    limits: list[int | None] = [None] * len(headers)
    limits[wrapped] = width
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="github", maxcolwidths=limits)
