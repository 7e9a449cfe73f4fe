"""``rnn-harness init``: copy the bundled case files into a folder to edit."""

from __future__ import annotations

import argparse

from harness.errors import printable


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    ini = commands.add_parser("init", help="copy the bundled case files into a folder to edit")
    ini.add_argument("dir", metavar="DIR", help="the folder (created; existing files are never "
                     "overwritten)")
    return ini


def handle(args: argparse.Namespace) -> int:
    from harness.bundled import copy_bundled

    written = copy_bundled(args.dir)
    print(printable(f"copied {len(written)} bundled case file(s) to {args.dir}/; edit them, "
                    f"then `rnn-harness run {args.dir}`"))
    return 0
