"""``rnn-harness merge``: combine the report folders of ``run --shard K/N`` into one."""

from __future__ import annotations

import argparse
import sys

from harness.cli.options import plots_option
from harness.cli.outcome import compared_anything, counts, tested_a_framework
from harness.errors import printable


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    m = commands.add_parser("merge",
                            help="combine the report folders of `run --shard K/N` into one",
                            usage="rnn-harness merge SHARD_DIR... --out OUT_DIR [options]\n"
                                  "       rnn-harness merge OUT_DIR SHARD_DIR... [options]",
                            description="Combine shard report folders into one report folder, as "
                            "if the pairs had run in one `run`: divergence.csv rows and run.json "
                            "pairs in the unsharded order, summary.md, layouts.md and index.html "
                            "regenerated, errors.log and outputs/ combined, timings summed, each "
                            "shard's versions kept (a warning in summary.md when they differ). "
                            "Refuses (exit 2) shards of different runs, a pair in two folders, "
                            "and an incomplete set of shards. Exit 0 when every applicable pair "
                            "passes, 1 when one diverged or failed.")
    m.add_argument("folders", metavar="FOLDER", nargs="+",
                   help="the shards' report folders; without --out the first folder given is "
                        "the merged report folder (`merge OUT_DIR SHARD_DIR...`)")
    m.add_argument("--out", metavar="OUT_DIR",
                   help="the merged report folder (`merge SHARD_DIR... --out OUT_DIR`)")
    m.add_argument("--allow-partial", action="store_true",
                   help="merge even when shards are missing (or the folders are not shards of "
                        "one run); the report says which are missing")
    plots_option(m)
    return m


def handle(args: argparse.Namespace) -> int:
    from harness.merge import merge_reports
    from harness.report.folder import merge_folders

    out, option, shards = merge_folders(args.folders, args.out)
    merged = merge_reports(out, shards, allow_partial=args.allow_partial, plots=args.plots,
                           option=option)
    for line in merged.warnings:  # versions and platforms read from the shards' run.json
        print(printable(f"rnn-harness: warning: {line}"), file=sys.stderr)
    print(printable(f"merged {len(shards)} report(s) ({', '.join(merged.shards) or 'not shards'}"
                    f"): " + counts(merged.result.pairs) + f"; report in {merged.out}/"))
    # a merge that compared nothing (or no framework) tested nothing, as such a run
    return 1 if merged.result.failed or not (compared_anything(merged.result.pairs)
                                             and tested_a_framework(merged.result)) else 0
