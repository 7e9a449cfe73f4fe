"""The plugin's options (``--rnn-adapters``, ``--rnn-device``, ``--rnn-require-gpu``,
``--rnn-shard``), their short names for a conftest that wants them, and the plan they make
(:mod:`harness.plan`: the adapters and the device, decided as ``rnn-harness run`` decides
them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from harness.plan import Plan, Request

# (plugin option, short name a conftest may add, argparse keywords)
_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("--rnn-adapters", "--adapters", dict(
        dest="rnn_adapters", default=None, metavar="A,B",
        help="comma-separated adapters to pair with every case, or all (the default: every "
             "adapter of --rnn-device but those run only when named, which `rnn-harness "
             "adapters` lists), or every (those too); the baseline (reference) is compared "
             "with, not an item itself")),
    ("--rnn-device", "--device", dict(
        dest="rnn_device", default=None, choices=["cpu", "gpu", "all"],
        help="the adapters of this device (default, as `rnn-harness run`: the devices this "
             "machine has: cpu, and gpu too where nvidia-smi sees a GPU; all with "
             "--rnn-require-gpu or when --rnn-adapters names adapters); with gpu, each case's "
             "reference is computed on the GPU where torch sees one")),
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


def request(config: pytest.Config) -> Request:
    """The plugin's options as a :class:`harness.plan.Request` (checked: an unknown adapter is
    a :class:`HarnessError` naming the option as the command line spelled it)."""
    from harness.plan import Request

    return Request(adapters=config.getoption("rnn_adapters"),
                   device=config.getoption("rnn_device"),
                   require_gpu=bool(config.getoption("rnn_require_gpu")),
                   adapters_field=spelled(config, "--rnn-adapters", "--adapters"),
                   device_field=spelled(config, "--rnn-device", "--device"))


PLAN = pytest.StashKey["Plan"]()


def planned(config: pytest.Config) -> Plan:
    """The run's :class:`harness.plan.Plan`, as ``rnn-harness run`` makes it from the same
    options: made at the first case file (the registry is imported then, not before, and the
    machine asked for a GPU once), then kept. :meth:`Plan.for_cases` gives a case file's."""
    if PLAN not in config.stash:
        from harness.plan import plan

        config.stash[PLAN] = plan(request(config))
    return config.stash[PLAN]
