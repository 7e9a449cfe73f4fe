"""``rnn-harness doctor``: find the layout mistake that reproduces some outputs."""

from __future__ import annotations

import argparse
import math

from harness.cli.checks import check_adapters, check_layout
from harness.cli.options import format_option
from harness.errors import HarnessError


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    dr = commands.add_parser("doctor", help="find the layout mistake that reproduces some outputs")
    dr.add_argument("--case", required=True, help="the case file (sizes, semantics, inputs)")
    dr.add_argument("--weights", required=True, metavar="IN", help="the weights file")
    dr.add_argument("--layout", required=True, metavar="CLAIMED",
                    help="the layout the weights are believed to be in")
    truth = dr.add_mutually_exclusive_group(required=True)
    truth.add_argument("--expected", metavar="OUT.npz", help="the outputs the weights really give "
                       "(y, optionally h_n, c_n)")
    truth.add_argument("--adapter", metavar="NAME", help="run this adapter on the weights read "
                       "as its own layout: its framework is the source of truth")
    dr.add_argument("--write-fixed", metavar="FIXED.npz",
                    help="write the corrected weights in the claimed layout")
    dr.add_argument("--repro", metavar="DIR", help="write DIR/repro.py, NumPy only: the claimed "
                    "reading and the corrected one side by side against the outputs")
    dr.add_argument("--name", help="the case to use when the file expands to several")
    dr.add_argument("--select", help="as for convert")
    dr.add_argument("--budget", type=float, default=60.0, metavar="SECONDS",
                    help="stop searching after this long (default 60)")
    format_option(dr, "markdown")
    return dr


def handle(args: argparse.Namespace) -> int:
    from harness.doctor import doctor_file

    check_layout(args.layout, "--layout")
    if args.adapter:
        check_adapters([args.adapter], "--adapter", selections=False)
    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise HarnessError(f"expected a finite number of seconds > 0, got {args.budget:g}",
                           field="--budget")
    text, code = doctor_file(args.case, args.weights, args.layout, expected=args.expected,
                             adapter=args.adapter, write_fixed=args.write_fixed, name=args.name,
                             select=args.select, budget_s=args.budget, fmt=args.format,
                             repro=args.repro)
    print(text, end="")
    return code
