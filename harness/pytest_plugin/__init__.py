"""The pytest plugin: case files as tests, one item per case x adapter.

Installed as the ``pytest11`` entry point ``rnn_harness``, so ``pytest some/folder`` anywhere
collects the case files in it (``-p no:rnn_harness`` turns it off). A case file is a ``.yaml`` /
``.yml`` file that is recognisably one (:func:`is_case_file`: a top-level ``cell:`` naming a cell
kind, or a ``matrix:`` of case keys varying ``cell``); a YAML file named on the command line is
always taken as one. Other YAML (a ``.travis.yml``, a CI workflow, a tox or compose file, a
tool's config with a ``cell:``) is passed over. A file found in a folder is loaded under
``run``'s rule for a folder's files (:func:`harness.cases.load_found`: no link leading outside
the folder named on the command line is followed).

The tree: the file, a node per case, an item per adapter, so the printed node ids re-select
what they name::

    cases/reverse.yaml::reverse-lstm::torch-cpu

Outcomes: a compared pair passes or fails with its first diverging step and a short
per-timestep table (not a traceback); not-applicable and unavailable pairs are skipped with their
reason (``--rnn-require-gpu`` fails an unavailable GPU adapter instead); a known upstream bug
is an xfail, one that looks fixed a failure. A case file that cannot be loaded is one failing
item, ``<file>::load``, whose message names the file, line and field: collection itself goes on.

The adapters and the device are chosen as ``rnn-harness run`` chooses them (:mod:`harness.plan`):
by default the devices this machine has, so a machine without a GPU collects no GPU item unless
asked (``--rnn-device gpu`` or ``all``, ``--rnn-require-gpu``, or a GPU adapter named).

Each item's JUnit ``<property>`` elements (``--junitxml``) carry the case, adapter, framework,
device, dtype, the verdict, the worst error (``max_abs``, ``tol_ratio``) and the first diverging
step (``first_diverging_output``, ``_layer``, ``_direction``, ``_t``).

The options (``pytest --help``, group "rnn-harness") carry an ``--rnn-`` prefix: the plugin is
loaded into every pytest run of an environment that has the package, and short names such as
``--device`` are common in other projects' conftests, where two definitions would stop pytest.
:func:`add_short_options` adds ``--adapters``, ``--device``, ``--require-gpu`` and ``--shard``
beside them, for a conftest that wants them (this repository's does).

The package imports nothing heavy at its top: collection loads the harness only when it meets
a case file. Its modules: ``detect`` (which files are case files), ``options``, ``items`` (the
collection tree and how a pair's outcome becomes the item's), ``messages`` (JUnit properties,
the divergence text).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin.detect import CASE_SUFFIXES, is_case_file
from harness.pytest_plugin.items import CaseFile, LoadError, PairItem
from harness.pytest_plugin.options import (
    PLAN,
    add_options,
    add_short_options,
    request,
    spelled,
)

PLUGIN_NAME = "rnn_harness"  # the entry point's name in pyproject.toml

# Markers the items carry: registered here so that a project with --strict-markers accepts them.
# FRAMEWORK_MARKERS names every adapter's framework (tests/project/test_pytest_plugin.py checks
# it against the registry, which is not imported here: it costs a second at start-up).
FRAMEWORK_MARKERS = ("reference", "torch", "tensorflow", "keras", "onnx", "cupy", "litert",
                     "openvino", "jax", "mlx")
MARKERS = {"conformance": "a case x adapter conformance item (rnn-harness)",
           "gpu": "needs a CUDA GPU",
           **{f: f"rnn-harness adapters of the {f} framework" for f in FRAMEWORK_MARKERS}}

SHARD = pytest.StashKey[Any]()  # the harness.shard.Shard of --rnn-shard, or None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    from harness.errors import HarnessError
    from harness.shard import parse_shard

    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")
    text = config.getoption("rnn_shard")
    try:
        config.stash[SHARD] = (parse_shard(text, spelled(config, "--rnn-shard", "--shard"))
                               if text is not None else None)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("rnn_adapters") is not None:  # an unknown name: a usage error, up front
        try:
            request(config)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """Where the device rule left the GPU adapters out (as ``run``'s summary line says it)."""
    plan = config.stash.get(PLAN, None)  # made only where a case file was collected
    return [f"rnn-harness: {plan.note}"] if plan is not None and plan.note else []



def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in CASE_SUFFIXES:
        return None
    session = parent.session
    if session.isinitpath(file_path):
        return CaseFile.from_parent(parent, path=file_path)
    if is_case_file(file_path):
        return CaseFile.from_parent(parent, path=file_path, found_in=_walked(session, file_path))
    return None


def _walked(session: pytest.Session, file_path: Path) -> Path:
    """The folder named on the command line (or pytest's root, where none holds the file) whose
    walk found ``file_path``: links may not lead out of it (as ``run``'s folders)."""
    return next((folder for folder in file_path.parents if session.isinitpath(folder)),
                session.config.rootpath)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--rnn-shard K/N``: keep this shard's pairs (their ids ``case::adapter``, dealt by
    :mod:`harness.shard`) and, in shard 1 only, every other item."""
    shard = config.stash.get(SHARD, None)
    if shard is None:
        return
    from harness.errors import HarnessError

    pairs = [item for item in items if isinstance(item, PairItem)]
    try:
        mine = set(shard.pick(item.pair_id for item in pairs)) if pairs else set()
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    keep, drop = [], []
    for item in items:
        ours = item.pair_id in mine if isinstance(item, PairItem) else shard.index == 1
        (keep if ours else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None] | pytest.TestReport:
    """A pair's skip is placed at its case (``cases/x.yaml:2: not applicable: ...``), not at
    the plugin's line that raised it (pytest does the same for a skip mark)."""
    report = yield
    if isinstance(item, PairItem) and report.skipped and type(report.longrepr) is tuple:
        path, line, _ = item.reportinfo()
        report.longrepr = (str(path), (line or 0) + 1, report.longrepr[2])
    return report




__all__ = ["PLUGIN_NAME", "CaseFile", "LoadError", "PairItem", "add_short_options",
           "is_case_file"]
