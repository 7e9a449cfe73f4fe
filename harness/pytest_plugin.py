"""The pytest plugin: case files as tests, one item per case x adapter.

Installed as the ``pytest11`` entry point ``rnn_harness``, so ``pytest some/folder`` anywhere
collects the case files in it (``-p no:rnn_harness`` turns it off). A case file is a ``.yaml`` /
``.yml`` file with a top-level ``cell:`` or ``matrix:`` key; a YAML file named on the command line
is always taken as one. Other YAML (a CI workflow, a tox or compose file) is passed over.

The tree: the file, a node per case, an item per adapter, so the printed node ids re-select
what they name::

    cases/reverse.yaml::reverse-lstm::torch-cpu

Outcomes: a compared pair passes or fails with its first diverging step and a short
per-timestep table (not a traceback); not-applicable and unavailable pairs are skipped with their
reason (``--rnn-require-gpu`` fails an unavailable GPU adapter instead); a known upstream bug is
an xfail, one that looks fixed a failure. A case file that cannot be loaded is one failing item,
``<file>::load``, whose message names the file, line and field: collection itself goes on.

Each item's JUnit ``<property>`` elements (``--junitxml``) carry the case, adapter, framework,
device, dtype, the verdict, the worst error (``max_abs``, ``tol_ratio``) and the first diverging
step (``first_diverging_output``, ``_layer``, ``_direction``, ``_t``).

The options (``pytest --help``, group "rnn-harness") carry an ``--rnn-`` prefix: the plugin is
loaded into every pytest run of an environment that has the package, and short names such as
``--device`` are common in other projects' conftests, where two definitions would stop pytest.
:func:`add_short_options` adds ``--adapters``, ``--device``, ``--require-gpu`` and ``--shard``
beside them, for a conftest that wants them (this repository's does).

The module imports nothing heavy at its top: collection loads the harness only when it meets a
case file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PLUGIN_NAME = "rnn_harness"  # the entry point's name in pyproject.toml
CASE_SUFFIXES = (".yaml", ".yml")
LOAD_ITEM = "load"  # the item of a case file that cannot be loaded

# A case file is at most harness.cases.MAX_YAML_BYTES (1 MiB); its top-level keys are lines that
# start with the key. Scanning the first MiB for such a line decides without parsing anything,
# and still recognises a case file that is broken as YAML (its item then reports the error).
SCAN_BYTES = 1 << 20
_CASE_KEY = re.compile(rb"^(?:\xef\xbb\xbf)?(?:cell|matrix|\"cell\"|\"matrix\"|'cell'|'matrix')"
                       rb"[ \t]*:(?:[ \t\r]|$)", re.M)

# Markers the items carry: registered here so that a project with --strict-markers accepts them.
# FRAMEWORK_MARKERS names every adapter's framework (tests/project/test_pytest_plugin.py checks
# it against the registry, which is not imported here: it costs a second at start-up).
FRAMEWORK_MARKERS = ("reference", "torch", "tensorflow", "keras", "onnx", "cupy", "litert",
                     "openvino", "jax")
MARKERS = {"conformance": "a case x adapter conformance item (rnn-harness)",
           "gpu": "needs a CUDA GPU",
           **{f: f"rnn-harness adapters of the {f} framework" for f in FRAMEWORK_MARKERS}}

# (plugin option, short name a conftest may add, argparse keywords)
_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("--rnn-adapters", "--adapters", dict(
        dest="rnn_adapters", default=None, metavar="A,B",
        help="comma-separated adapters to pair with every case (default: every adapter of "
             "--rnn-device); the baseline (reference) is compared with, not an item itself")),
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

SHARD = pytest.StashKey[Any]()  # the harness.shard.Shard of --rnn-shard, or None
ADAPTERS = pytest.StashKey[list]()  # the adapters chosen by --rnn-adapters / --rnn-device


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(*_GROUP)
    for option, _, kwargs in _OPTIONS:
        group.addoption(option, **kwargs)


def add_short_options(parser: pytest.Parser) -> None:
    """Add ``--adapters``, ``--device``, ``--require-gpu`` and ``--shard``, the same options as
    their ``--rnn-`` names, for a conftest's ``pytest_addoption``."""
    group = parser.getgroup(*_GROUP)
    for option, short, kwargs in _OPTIONS:
        group.addoption(short, **{**kwargs, "help": f"same as {option}"})


def pytest_configure(config: pytest.Config) -> None:
    from harness.errors import HarnessError
    from harness.shard import parse_shard

    known = {line.split(":")[0].strip() for line in config.getini("markers")}
    for name, text in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")
    text = config.getoption("rnn_shard")
    try:
        config.stash[SHARD] = (parse_shard(text, _spelled(config, "--rnn-shard", "--shard"))
                               if text is not None else None)
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("rnn_adapters"):  # an unknown name is a usage error, up front
        try:
            chosen_adapters(config)
        except HarnessError as exc:
            raise pytest.UsageError(f"{_spelled(config, '--rnn-adapters', '--adapters')}: "
                                    f"{exc}") from None


def _spelled(config: pytest.Config, option: str, short: str) -> str:
    """The option's name as the command line gave it, for its error message."""
    given = {str(a).split("=")[0] for a in config.invocation_params.args}
    return short if short in given and option not in given else option


def chosen_adapters(config: pytest.Config) -> list:
    """The adapters ``--rnn-adapters`` and ``--rnn-device`` select (the registry is imported at
    the first case file, not before)."""
    if ADAPTERS not in config.stash:
        from harness import adapters as registry

        names = config.getoption("rnn_adapters")
        config.stash[ADAPTERS] = registry.select(
            [n.strip() for n in names.split(",") if n.strip()] if names else None,
            config.getoption("rnn_device"))
    return config.stash[ADAPTERS]


def is_case_file(path: Path) -> bool:
    """Whether ``path`` is a ``.yaml``/``.yml`` regular file with a top-level ``cell:`` or
    ``matrix:`` key in its first MiB: a line that starts with one, or, in a file written as one
    flow mapping (``{cell: gru, ...}``, JSON), a key of that mapping. Nothing is run; only a
    flow mapping is parsed (safe_load)."""
    if path.suffix not in CASE_SUFFIXES or not path.is_file():  # is_file: no FIFO, no device
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(SCAN_BYTES)
    except OSError:  # unreadable: not collected unless named (then its item says why)
        return False
    return _CASE_KEY.search(head) is not None or _flow_mapping_has_case_key(head)


def _flow_mapping_has_case_key(head: bytes) -> bool:
    first = next((line.strip() for line in head.removeprefix(b"\xef\xbb\xbf").splitlines()
                  if line.strip() and not line.strip().startswith((b"#", b"%", b"---"))), b"")
    if not first.startswith(b"{"):
        return False
    import yaml

    try:
        data = yaml.safe_load(head.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False  # a broken one is a case file only when named
    return isinstance(data, dict) and ("cell" in data or "matrix" in data)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in CASE_SUFFIXES:
        return None
    if parent.session.isinitpath(file_path) or is_case_file(file_path):
        return CaseFile.from_parent(parent, path=file_path)
    return None


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


class ConformanceFailure(Exception):
    """A pair's failure, shown as its message alone (no traceback)."""


class CaseFile(pytest.File):
    """A case file: a :class:`CaseNode` per case (a ``matrix:`` expands to several), or the
    one failing :class:`LoadError` item when the file cannot be loaded."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from harness.cases import load_cases
        from harness.errors import HarnessError

        try:
            cases = load_cases(self.path)
        except HarnessError as exc:
            yield LoadError.from_parent(self, name=LOAD_ITEM, error=exc)
            return
        adapters = [a for a in chosen_adapters(self.config) if not a.baseline]
        for case in cases:
            yield CaseNode.from_parent(self, name=case.name, case=case, adapters=adapters)


class CaseNode(pytest.Collector):
    """One case: a :class:`PairItem` per adapter. It prepares the case (weights, inputs, the
    reference) for its first item and lets it go at its teardown, once its items have run."""

    def __init__(self, *, case: Any, adapters: list, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.adapters = adapters
        self._prepared: Any = None
        self._blind: dict[tuple, Any] = {}
        self._line: int | None = -1

    @property
    def line(self) -> int | None:
        """The 0-based line of the case's ``name:`` in its file (None where there is none)."""
        if self._line == -1:
            from harness.cases import field_line

            line = field_line(self.path, ("name",))
            self._line = line - 1 if line else None
        return self._line

    def collect(self) -> Iterator[pytest.Item]:
        for adapter in self.adapters:
            item = PairItem.from_parent(self, name=adapter.name, case=self.case,
                                        adapter=adapter)
            item.add_marker("conformance")
            item.add_marker(adapter.framework)
            if adapter.device == "gpu":
                item.add_marker("gpu")
            yield item

    def prepared(self) -> Any:
        """The case's :class:`harness.prepare.Prepared`, made once (a case error is kept and
        raised again for every item)."""
        from harness.errors import HarnessError
        from harness.prepare import prepare

        if self._prepared is None:
            try:  # --rnn-device gpu: the reference on the GPU
                self._prepared = prepare(self.case, device=self.config.getoption("rnn_device"))
            except HarnessError as exc:
                self._prepared = exc
        if isinstance(self._prepared, HarnessError):
            raise ConformanceFailure(f"case error: {self._prepared}")
        return self._prepared

    def blind_check(self, adapter: Any) -> Any:
        """The blind-spot check of the case under ``adapter``'s effective tolerance
        (:func:`harness.blind.check`), made once per tolerance."""
        from harness import blind
        from harness.compare import tolerance_for

        key = tolerance_for(self.case, adapter.name, adapter.tolerances)
        if key not in self._blind:
            self._blind[key] = blind.check(self.case, [adapter])
        return self._blind[key]

    def teardown(self) -> None:
        self._prepared = None  # the reference outputs of a large case: not kept to the end
        self._blind.clear()


class PairItem(pytest.Item):
    """One case x adapter pair, run as ``rnn-harness run`` runs it."""

    parent: CaseNode

    def __init__(self, *, case: Any, adapter: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.adapter = adapter
        # JUnit XML <property> elements: CI dashboards group and filter by these without
        # parsing test names
        self.user_properties += [("case", case.name), ("adapter", adapter.name),
                                 ("framework", adapter.framework), ("device", adapter.device),
                                 ("dtype", case.dtype)]

    @property
    def pair_id(self) -> str:
        """``case::adapter``, as reports and ``--shard`` name the pair."""
        from harness.shard import pair_id

        return pair_id(self.case.name, self.adapter.name)

    def runtest(self) -> None:
        from harness import compare
        from harness.runner import run_pair

        r = run_pair(self.parent.prepared(), self.adapter)
        self.user_properties += pair_properties(r)
        if r.status == compare.NOT_APPLICABLE:
            pytest.skip(f"not applicable: {r.reason}")
        if r.status == compare.UNAVAILABLE:
            if self.adapter.device == "gpu" and self.config.getoption("rnn_require_gpu"):
                raise ConformanceFailure(f"GPU adapter cannot run: {r.reason}")
            pytest.skip(f"unavailable: {r.reason}")
        if r.status == compare.ERROR:
            raise ConformanceFailure(f"adapter error: {r.reason}\n{r.detail}")
        check = self.parent.blind_check(self.adapter)
        if check is not None and check.warning:  # a pass here proves less
            self.user_properties.append(("warning", check.warning))
        if check is not None and check.error:
            raise ConformanceFailure(f"case error: {check.error}")
        # the run decides what is a known upstream bug (harness.compare.as_expected): an xfail
        # while it shows, a failure once it looks fixed, so the stale expectation is removed
        if r.status == compare.KNOWN_BUG:
            pytest.xfail(r.reason)
        if r.status == compare.LOOKS_FIXED:
            raise ConformanceFailure(f"looks fixed: {r.reason}")
        if r.status == compare.DIVERGED:
            raise ConformanceFailure(failure_text(r))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str | Any:
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.pair_id}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, self.parent.line, self.pair_id


class LoadError(pytest.Item):
    """The item of a case file that cannot be loaded: it fails with the file's error (file,
    line, field, what was expected) so that the other files are still collected and run."""

    def __init__(self, *, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error
        self.user_properties.append(("error", str(error)))

    def runtest(self) -> None:
        raise ConformanceFailure(str(self.error))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str | Any:
        if isinstance(excinfo.value, ConformanceFailure):
            return f"case file cannot be loaded: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        line = getattr(self.error, "line", None)
        return self.path, line - 1 if line else None, f"{self.path.name}: {LOAD_ITEM}"


def pair_properties(r: Any) -> list[tuple[str, str]]:
    """A PairResult as JUnit properties: the verdict, the worst error (its ``max_abs``, its
    ``tol_ratio`` to the tolerance and where) and the first diverging step, whole
    (``first_diverging``, e.g. ``y L0 d1 t=3``) and by part (output, layer, direction, t)."""
    from harness import compare

    props = [("verdict", r.status), ("seconds", f"{r.seconds:.4f}")]
    w = r.worst
    if w is not None:
        props += [("max_abs", f"{w['max_abs']:.6g}"), ("tol_ratio", f"{w['tol_ratio']:.6g}"),
                  ("worst_output", str(w["output"])), ("worst_at", compare.where(w))]
    f = r.first_diverging
    if f is not None:
        props.append(("first_diverging", compare.where(f)))
        props.append(("first_diverging_output", str(f["output"])))
        for part in ("layer", "direction", "t"):  # a missing direction or t (dW, dx) is left out
            value = f.get(part)
            if value is not None and value == value and value >= 0:
                props.append((f"first_diverging_{part}", str(int(value))))
    if r.reason:
        props.append(("reason", r.reason))
    return props


def failure_text(r: Any) -> str:
    """First diverging step and the per-timestep table of the output where it happened."""
    from tabulate import tabulate

    from harness import compare

    f = r.first_diverging
    if f is None:
        return f"DIVERGED: {r.reason}"
    head = (f"DIVERGED: first at {compare.where(f)}: "
            f"max_abs {f['max_abs']:.3e} = {f['tol_ratio']:.3g}x tolerance "
            f"(atol {f['atol']:g}, rtol {f['rtol']:g})")
    rows = compare.of_mode(r.rows, f.get("mode") or compare.FREE)  # its own mode's rows only
    same_direction = (rows["direction"].fillna(-1) == f["direction"]
                      if f["output"] != "dx" else True)
    sel = rows[(rows["output"] == f["output"]) & (rows["layer"] == f["layer"]) & same_direction]
    columns = ["t", "max_abs", "max_rel", "max_ulp", "tol_ratio", "noise_floor", "verdict"]
    table = tabulate(sel[columns].head(12).values.tolist(),
                     headers=["t", "max_abs", "max_rel", "max_ulp", "x tol", "noise floor",
                              "verdict"],
                     floatfmt=".2e")
    return head + "\n" + table
