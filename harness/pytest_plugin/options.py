"""The plugin's options (``--rnn-adapters``, ``--rnn-device``, ``--rnn-require-gpu``,
``--rnn-shard``), their short names for a conftest that wants them, and the adapters they
select."""

from __future__ import annotations

from typing import Any

import pytest

# (plugin option, short name a conftest may add, argparse keywords)
_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("--rnn-adapters", "--adapters", dict(
        dest="rnn_adapters", default=None, metavar="A,B",
        help="comma-separated adapters to pair with every case, or all (the default: every "
             "adapter of --rnn-device but those run only when named, which `rnn-harness "
             "adapters` lists), or every (those too); the baseline (reference) is compared "
             "with, not an item itself")),
    ("--rnn-device", "--device", dict(
        dest="rnn_device", default="all", choices=["cpu", "gpu", "all"],
        help="the adapters of this device (default: all); with gpu, each case's reference is "
             "computed on the GPU where torch sees one")),
    ("--rnn-require-gpu", "--require-gpu", dict(
        dest="rnn_require_gpu", action="store_true",
        help="fail, not skip, the items of a GPU adapter that cannot run")),
    ("--rnn-shard", "--shard", dict(
        dest="rnn_shard", default=None, metavar="K/N",
        help="keep shard K of N of the case x adapter items (dealt as `rnn-harness run "
             "--shard` deals pairs); every other test runs in shard 1 only, so N jobs with "
             "1/N .. N/N run everything exactly once")),
)
_GROUP = ("rnn-harness", "rnn-harness: case files x adapters as test items")



def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup(*_GROUP)
    for option, _, kwargs in _OPTIONS:
        group.addoption(option, **kwargs)


def add_short_options(parser: pytest.Parser) -> None:
    """Add ``--adapters``, ``--device``, ``--require-gpu`` and ``--shard``, the same options as
    their ``--rnn-`` names, for a conftest's ``pytest_addoption``."""
    group = parser.getgroup(*_GROUP)
    for option, short, kwargs in _OPTIONS:
        group.addoption(short, **{**kwargs, "help": f"same as {option}"})


def spelled(config: pytest.Config, option: str, short: str) -> str:
    """The option's name as the command line gave it, for its error message."""
    given = {str(a).split("=")[0] for a in config.invocation_params.args}
    return short if short in given and option not in given else option


def chosen_adapters(config: pytest.Config, cases: list) -> list:
    """The adapters ``--rnn-adapters`` and ``--rnn-device`` select for one case file's
    ``cases``: a named-only adapter (left out of the default selection for cost) where it is
    named, on the command line or in a case's ``adapters:`` (the registry is imported at the
    first case file, not before)."""
    from harness import adapters as registry

    given = config.getoption("rnn_adapters")
    names = [n.strip() for n in given.split(",") if n.strip()] if given else None
    if names == []:  # "," names nothing: a mistake, not the default selection
        from harness.errors import HarnessError

        raise HarnessError(f"expected comma-separated adapter names (or all, every), got "
                           f"{given!r}")
    return registry.select(names, config.getoption("rnn_device"), cases)


def named_adapters(config: pytest.Config) -> frozenset[str]:
    """The adapters ``--rnn-adapters`` names (``all`` names none, ``every`` each)."""
    from harness.adapters import named_explicitly

    names = config.getoption("rnn_adapters") or ""
    return named_explicitly(n.strip() for n in names.split(",") if n.strip())
