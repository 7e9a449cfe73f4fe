"""Options several commands share, declared once."""

from __future__ import annotations

import argparse


def plots_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plots", choices=["failed", "all", "none"], default="failed",
                        help="which pairs index.html draws plots for (default failed: the "
                             "pairs that did not pass, DIVERGED or an error with rows; all: "
                             "every pair with rows; none: no plots)")


def format_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument("--format", choices=[default, "json"], default=default,
                        help=f"output format (default {default})")
