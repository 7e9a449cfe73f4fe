"""``rnn-harness layouts``: each layout's mapping table, for example cases or a case file's."""

from __future__ import annotations

import argparse

from harness.cli.checks import check_layout


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    la = commands.add_parser("layouts", help="print layout mapping tables")
    la.add_argument("--layout", help="one layout (default: all)")
    la.add_argument("--case", help="a case file whose sizes to use")
    return la


def handle(args: argparse.Namespace) -> int:
    from harness.cases import load_cases
    from harness.layouts import LAYOUTS, get_layout
    from harness.report.layouts_md import mapping_markdown
    from harness.spec import Case

    if args.case:
        cases = load_cases(args.case)
    else:
        cases = [Case(name="example-lstm", cell="lstm", input_size=3, hidden_size=4),
                 Case(name="example-gru", cell="gru", input_size=3, hidden_size=4)]
    check_layout(args.layout, "--layout")
    layouts = [get_layout(args.layout)] if args.layout else list(LAYOUTS.values())
    for layout in layouts:
        for case in cases:
            if case.cell in layout.cells:
                print(mapping_markdown(layout, case))
    return 0
