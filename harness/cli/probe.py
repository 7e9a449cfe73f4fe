"""``rnn-harness probe``: measure an adapter's layout and compare it with the declared one."""

from __future__ import annotations

import argparse

from harness.cli.checks import check_adapters


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    pr = commands.add_parser("probe",
                             help="measure an adapter's layout and compare with the declared one")
    pr.add_argument("--adapter", required=True, metavar="NAME",
                    help="the adapter whose layout to measure (`rnn-harness adapters` lists them)")
    pr.add_argument("--case", help="a case file (default: an LSTM and a GRU, I 2, H 3)")
    pr.add_argument("--name", help="one case of the file")
    pr.add_argument("--case-sizes", action="store_true",
                    help="probe at the case's own sizes (default: I 2, H 3, P 2, at most 2 "
                         "layers, which show the same layout; a probe is one framework run per "
                         "native entry)")
    return pr


def handle(args: argparse.Namespace) -> int:
    from harness.probe import probe_file
    from harness.progress import plain_progress

    check_adapters([args.adapter], "--adapter", selections=False)
    text, code = probe_file(args.adapter, args.case, name=args.name, case_sizes=args.case_sizes,
                            progress=plain_progress)
    print(text, end="")
    return code
