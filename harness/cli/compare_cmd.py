"""``rnn-harness compare ORIGINAL SHIPPED``: does every recurrent layer of SHIPPED compute what
its layer of ORIGINAL computes (docs/compare.md)? Exit 0 the same, 1 a layer differs, 2 bad
input."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    c = commands.add_parser("compare", help="compare a shipped model (a port, an export) with "
                            "the model it came from, layer by layer; exit 1 where a layer "
                            "differs")
    c.add_argument("original", metavar="ORIGINAL", help="the model trained (.keras, .h5, .pt, "
                   ".msgpack, .onnx)")
    c.add_argument("shipped", metavar="SHIPPED", help="the model shipped (a port's .pt or "
                   ".keras, an .onnx)")
    c.add_argument("--select", help="one layer, by its name or path (rnn/layer1), of SHIPPED or "
                   "else of ORIGINAL")
    c.add_argument("--inputs", metavar="FILE.npy", help="data for the outputs verdict instead "
                   "of generated inputs: an ONNX node of the main graph sees what the shipped "
                   "model computes for it; a port's layer gets it as [batch, steps, features] "
                   "(.npz: arrays by the shipped model's input names)")
    c.add_argument("--out", metavar="DIR", help="also write DIR/compare.md, DIR/compare.json "
                   "and a reproducer folder per layer that differs")
    c.add_argument("--budget", type=float, default=30.0, metavar="SECONDS",
                   help="the doctor's time for each layer whose weights differ (default 30)")
    return c


def handle(args: argparse.Namespace) -> int:
    import math

    from harness.errors import HarnessError, printable
    from harness.models import compare_models
    from harness.models.render import check_folder, text, write_folder
    from harness.models.repro import write_repros

    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise HarnessError(f"expected a finite number of seconds > 0, got {args.budget:g}",
                           field="--budget")
    if args.out:
        check_folder(args.out)
    result = compare_models(args.original, args.shipped, select=args.select,
                            budget_s=args.budget, inputs=args.inputs)
    print(text(result), end="")
    if args.out:
        print(f"report: {write_folder(result, args.out)}")
        for line in write_repros(result, args.out):
            print(printable(line))
    return 0 if result else 1
