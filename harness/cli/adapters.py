"""``rnn-harness adapters``: the adapters, whether each can run here, and their capabilities."""

from __future__ import annotations

import argparse
import json

from harness.cli.options import format_option


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    a = commands.add_parser("adapters", help="list adapters, availability and capabilities")
    a.add_argument("--json", action="store_true", help="same as --format json")
    format_option(a, "text")
    return a


_FEATURES = ("peepholes", "projection", "cell_clip", "proj_clip", "gate_clip", "input_forget",
             "variable_lengths")


def _features(caps) -> str:
    """The features column: the boolean capabilities an adapter has, then ``gradients``, with the
    case features its backward pass is not compared for (``gradient_reasons``) in brackets."""
    names = [k for k in _FEATURES if getattr(caps, k) is True]
    if caps.gradients:
        excluded = " or ".join(sorted(caps.gradient_reasons))
        names.append(f"gradients (not with {excluded})" if excluded else "gradients")
    return ",".join(names)


def handle(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from harness.adapters import ADAPTERS
    from harness.isolation import unavailable_reason

    rows = []
    notes = []
    # asked once: an own-process adapter's is asked of a worker it starts
    reasons = {name: unavailable_reason(a) for name, a in ADAPTERS.items()}
    for a in ADAPTERS.values():
        reason = reasons[a.name]
        caps = a.capabilities.table()
        rows.append([a.name, a.device, "yes" if reason is None else f"no: {reason}",
                     a.layout_name or "-", caps["cells"], caps["directions"], caps["dtypes"],
                     _features(a.capabilities)])
        if a.capabilities.gradients:
            notes += [f"  {a.name} with {feature}: {why}"
                      for feature, why in sorted(a.capabilities.gradient_reasons.items())]
    if args.json or args.format == "json":
        print(json.dumps({a.name: {"available": reasons[a.name] is None,
                                   "reason": reasons[a.name], "device": a.device,
                                   "layout": a.layout_name, "named_only": a.named_only,
                                   "capabilities": a.capabilities.table()}
                          for a in ADAPTERS.values()}, indent=2))
        return 0
    print(tabulate(rows, headers=["adapter", "device", "available", "layout", "cells", "directions",
                                  "dtypes", "features"], tablefmt="github"))
    if notes:
        print("\nGradients not compared (forward only) for cases with these features:")
        print("\n".join(notes))
    named_only = [f"  {a.name}: run when named: {a.named_only}" for a in ADAPTERS.values()
                  if a.named_only is not None]
    if named_only:
        print("\nLeft out of the default selection (run when named in --adapters or in a "
              "case's adapters:):")
        print("\n".join(named_only))
    return 0
