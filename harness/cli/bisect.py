"""``rnn-harness bisect NODE_ID --package NAME``: a case x adapter pair on several releases of
one package, each in an environment of its own; a row per release, then the first release where
the verdict changes. Exit 0 when every release ran, 1 when one could not be installed or run
(named), 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.errors import HarnessError, printable
from harness.release_envs import default_cache

DEFAULT_LIMIT = 5


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    b = commands.add_parser(
        "bisect", help="run a case x adapter pair on several releases of one package and name "
                       "the first release where its verdict changes (docs/bisect.md)",
        description="Run NODE_ID on each release of --package, each in a virtual environment of "
                    "its own that sees the installed environment (pip installs the release "
                    "into it; environments are cached), print a row per release (verdict, worst "
                    "error, first diverging step) and the first release where the verdict "
                    "changes. Exit 0 when every release ran, 1 when one could not be installed "
                    "or run, 2 on bad input.")
    b.add_argument("node_id", metavar="NODE_ID",
                   help="FILE::CASE::ADAPTER, or FILE::ADAPTER for every case of the file (as "
                        "pytest's node ids: cases/gru-reset.yaml::gru-reset_after::flax-nnx)")
    b.add_argument("--package", required=True, metavar="NAME",
                   help="the package whose releases are tried (flax, torch, jax, ...)")
    b.add_argument("--versions", metavar="A,B,...",
                   help="the releases to try, comma-separated (default: the newest --limit "
                        "releases the package index offers for this Python, `pip index "
                        "versions`)")
    b.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help=f"without --versions: how many of the newest releases (default "
                        f"{DEFAULT_LIMIT})")
    b.add_argument("--python", metavar="PATH",
                   help="the interpreter the release environments are made from (default: this "
                        "one): a newer Python for releases that require it; it sees its own "
                        "site packages, so rnn-harness's requirements are installed there too")
    b.add_argument("--record", action="store_true",
                   help="also print what was measured as the known-bug registry's fields "
                        "(bisect_tried, seen_on, fixed_in), to paste into harness/known_bugs.py")
    b.add_argument("--cache", type=Path, default=default_cache(), metavar="DIR",
                   help="where the environments are kept between runs (default: "
                        "$XDG_CACHE_HOME/rnn-harness/bisect, else ~/.cache/rnn-harness/bisect)")
    return b


def _versions(text: str) -> list[str]:
    from harness.release_envs import parse_version

    versions = [v.strip() for v in text.split(",")]
    if not all(versions):
        raise HarnessError(f"expected releases separated by commas, got {text[:80]!r}",
                           field="--versions")
    for v in versions:
        parse_version(v)
    if len(set(versions)) != len(versions):
        raise HarnessError("a release is named twice", field="--versions")
    return versions


def handle(args: argparse.Namespace) -> int:
    from harness import bisect, release_envs

    node = bisect.parse_node(args.node_id)
    if args.limit < 1:
        raise HarnessError(f"expected a number >= 1, got {args.limit}", field="--limit")
    versions = _versions(args.versions) if args.versions is not None else None
    python = (release_envs.interpreter(args.python) if args.python is not None
              else release_envs.this_interpreter())  # exit 2: no such interpreter
    # exit 2: a package the index lacks
    offered = release_envs.index_versions(args.package, python)
    if versions is None:
        versions = offered[:args.limit]
    outcomes = bisect.bisect(
        node, args.package, versions,
        prepare=lambda v: release_envs.prepare(args.cache, args.package, v, python),
        progress=bisect.progress_to_terminal())
    short = ".".join(python.version.split(".")[:2])
    print("\n".join([bisect.table(outcomes, args.package),
                     *bisect.reason_lines(outcomes, args.package),
                     *bisect.change_lines(outcomes, args.package),
                     *(bisect.record_lines(outcomes, node, args.package, short)
                       if args.record else [])]))
    problems = bisect.problem_lines(outcomes, args.package)
    for line in problems:
        print(f"rnn-harness: {printable(line)}", file=sys.stderr)
    return 1 if problems else 0
