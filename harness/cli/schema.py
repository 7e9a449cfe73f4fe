"""``rnn-harness schema``: the JSON Schema of case files."""

from __future__ import annotations

import argparse
import json


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    s = commands.add_parser("schema", help="print the JSON Schema of case files")
    s.add_argument("--output", "-o", help="write to this file instead of stdout")
    return s


def handle(args: argparse.Namespace) -> int:
    from harness.npz import write_text
    from harness.spec import json_schema

    text = json.dumps(json_schema(), indent=2)
    if args.output:
        write_text(args.output, text + "\n")
    else:
        print(text)
    return 0
