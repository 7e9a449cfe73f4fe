"""``rnn-harness diff``: compare two report folders; exit 1 on a regression or a known upstream
bug that looks fixed."""

from __future__ import annotations

import argparse
import json
import math

from harness.cli.options import format_option
from harness.errors import HarnessError


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    d = commands.add_parser("diff", help="compare two report folders; exit 1 on a regression or "
                                         "a known upstream bug that looks fixed")
    d.add_argument("old", help="the earlier report folder")
    d.add_argument("new", help="the later report folder")
    d.add_argument("--factor", type=float, default=10.0,
                   help="a row whose max_abs grew more than this is a regression (default 10)")
    d.add_argument("--ignore-below", type=float, default=1.0, metavar="R",
                   help="ignore growth on rows within R x tolerance in both runs (default 1)")
    d.add_argument("--out", help="also write the markdown (or JSON) to this file")
    format_option(d, "markdown")
    return d


def handle(args: argparse.Namespace) -> int:
    from harness.diff import diff_markdown, diff_reports, load_report
    from harness.npz import write_text

    if not (math.isfinite(args.factor) and args.factor > 1):
        raise HarnessError(f"expected a finite number > 1, got {args.factor:g}", field="--factor")
    if not (math.isfinite(args.ignore_below) and args.ignore_below >= 0):
        raise HarnessError(f"expected a finite number >= 0, got {args.ignore_below:g}",
                           field="--ignore-below")
    d = diff_reports(load_report(args.old), load_report(args.new), args.factor, args.ignore_below)
    if args.format == "json":
        from harness.diff import diff_dict

        text = json.dumps(diff_dict(d), indent=2, default=str) + "\n"
    else:
        text = diff_markdown(d)
    print(text, end="")
    if args.out:
        from harness.report.ownership import add_entry

        write_text(args.out, text)
        add_entry(args.out)  # in a report folder: replaced with it by the next report
    return 1 if d.fails else 0  # a regression, or a known bug that looks fixed
