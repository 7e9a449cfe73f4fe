"""Collect ``cases/*.yaml`` x adapters as pytest items with ids like ``case::adapter``.

Not-applicable and unavailable pairs are skipped with their reason (unless ``--require-gpu``
turns an unavailable GPU adapter into a failure, as ``tox -e gpu`` does). A divergence is
reported as the first diverging timestep and a short per-timestep table, not a traceback.
Options: ``--adapters a,b`` and ``--device cpu|gpu|all`` select adapters. ``--shard K/N`` keeps
shard K of N of the ``case::adapter`` items (dealt as ``rnn-harness run --shard`` deals pairs, see
:mod:`harness.shard`, over the items collected here) and deselects the rest; every other test
(the harness's own, in ``tests/``) runs in shard 1 only. So N jobs running ``--shard 1/N`` ..
``--shard N/N`` with the same other options run every test exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import compare

CASES_DIR = Path(__file__).parent / "cases"
CASE_DIRS = (CASES_DIR, Path(__file__).parent / "cases-gpu")  # cases-gpu: tox -e gpu
_PREPARED: dict[str, object] = {}
SHARD = pytest.StashKey[object]()  # the harness.shard.Shard of --shard, or None


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("rnn-harness")
    g.addoption("--adapters", default=None,
                help="comma-separated adapters for the conformance items")
    g.addoption("--device", default="all", choices=["cpu", "gpu", "all"],
                help="adapters of this device")
    g.addoption("--require-gpu", action="store_true",
                help="fail, not skip, when a GPU adapter cannot run")
    g.addoption("--shard", default=None, metavar="K/N",
                help="run shard K of N of the case::adapter items (the harness's own tests run "
                     "in shard 1 only), so N jobs run everything exactly once")


def pytest_configure(config: pytest.Config) -> None:
    from harness.errors import HarnessError
    from harness.shard import parse_shard

    text = config.getoption("--shard")
    try:
        config.stash[SHARD] = parse_shard(text) if text is not None else None
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.stash.get(SHARD, None)
    if shard is None:
        return
    mine = set(shard.pick(item.name for item in items if isinstance(item, PairItem)))
    keep, drop = [], []
    for item in items:
        ours = item.name in mine if isinstance(item, PairItem) else shard.index == 1
        (keep if ours else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    if file_path.suffix in (".yaml", ".yml") and any(d in file_path.parents for d in CASE_DIRS):
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        from harness import adapters as registry
        from harness.cases import load_cases
        from harness.runner import selected_by_case

        names = self.config.getoption("--adapters")
        names = names.split(",") if names else None
        cases = load_cases(self.path)
        # a named-only adapter (left out of the default selection for cost) is collected for
        # the cases it is named for: in --adapters or in the case's adapters:
        chosen = registry.select(names, self.config.getoption("--device"), cases)
        named = frozenset(names or ()) - {"all"}
        for case in cases:
            for adapter in chosen:
                if adapter.baseline or not selected_by_case(case, adapter, named):
                    continue
                item = PairItem.from_parent(self, name=f"{case.name}::{adapter.name}",
                                            case=case, adapter=adapter)
                item.add_marker("conformance")
                item.add_marker(adapter.framework)
                if adapter.device == "gpu":
                    item.add_marker("gpu")
                known = case.expected.get(adapter.name)
                if known is not None:  # an open upstream bug: strict, so a fix shows as XPASS
                    item.add_marker(pytest.mark.xfail(
                        strict=True, raises=ConformanceFailure,
                        reason=f"known upstream bug {known.upstream}"))
                yield item


class ConformanceFailure(Exception):
    pass


class PairItem(pytest.Item):
    def __init__(self, *, case, adapter, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.adapter = adapter
        # JUnit XML <property> elements (every tox env writes --junitxml): CI dashboards can
        # group and filter by these without parsing test names.
        self.user_properties += [("case", case.name), ("adapter", adapter.name),
                                 ("framework", adapter.framework), ("device", adapter.device),
                                 ("dtype", case.dtype)]

    def runtest(self) -> None:
        from harness.prepare import prepare
        from harness.runner import run_pair

        prep = _PREPARED.get(self.case.name)
        if prep is None:
            prep = _PREPARED[self.case.name] = prepare(
                self.case, device=self.config.getoption("--device"))  # gpu: baseline there
        r = run_pair(prep, self.adapter)
        self.user_properties += pair_properties(r)
        if r.status == compare.NOT_APPLICABLE:
            pytest.skip(f"not applicable: {r.reason}")
        if r.status == compare.UNAVAILABLE:
            if self.adapter.device == "gpu" and self.config.getoption("--require-gpu"):
                raise ConformanceFailure(f"GPU adapter cannot run: {r.reason}")
            pytest.skip(f"unavailable: {r.reason}")
        if r.status == compare.ERROR:
            raise ConformanceFailure(f"adapter error: {r.reason}\n{r.detail}")
        check = blind_check(self.case, self.adapter)
        if check is not None and check.warning:  # JUnit <property>: a pass here proves less
            self.user_properties.append(("warning", check.warning))
        if check is not None and check.error:
            raise ConformanceFailure(f"case error: {check.error}")
        # KNOWN_BUG fails as its strict xfail expects; LOOKS_FIXED passes, so the strict xfail
        # reports XPASS(strict) and the stale expectation is removed
        if r.status in (compare.DIVERGED, compare.KNOWN_BUG):
            raise ConformanceFailure(failure_text(r))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ConformanceFailure):
            return f"{self.name}: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


_BLIND: dict[tuple, object] = {}


def blind_check(case, adapter):
    """The blind-spot check of ``case`` under ``adapter``'s effective tolerance
    (:func:`harness.blind.check`), made once per case and tolerance."""
    from harness import blind
    from harness.compare import tolerance_for

    key = (case.name, tolerance_for(case, adapter.name, adapter.tolerances))
    if key not in _BLIND:
        _BLIND[key] = blind.check(case, [adapter])
    return _BLIND[key]


def pair_properties(r) -> list[tuple[str, str]]:
    """verdict, worst max_abs and x tolerance, and first diverging row of a PairResult."""
    props = [("verdict", r.status), ("seconds", f"{r.seconds:.4f}")]
    w = r.worst
    if w is not None:
        props += [("max_abs", f"{w['max_abs']:.6g}"), ("tol_ratio", f"{w['tol_ratio']:.6g}"),
                  ("worst_output", str(w["output"]))]
    f = r.first_diverging
    if f is not None:
        props.append(("first_diverging", compare.where(f)))
    if r.reason:
        props.append(("reason", r.reason))
    return props


def failure_text(r) -> str:
    """First diverging step and the per-timestep table of the output where it happened."""
    from tabulate import tabulate

    f = r.first_diverging
    head = (f"DIVERGED: first at {compare.where(f)}: "
            f"max_abs {f['max_abs']:.3e} = {f['tol_ratio']:.3g}x tolerance "
            f"(atol {f['atol']:g}, rtol {f['rtol']:g})")
    rows = r.rows
    sel = rows[(rows["output"] == f["output"]) & (rows["layer"] == f["layer"])
               & (rows["direction"].fillna(-1) == f["direction"] if f["output"] != "dx" else True)]
    columns = ["t", "max_abs", "max_rel", "max_ulp", "tol_ratio", "noise_floor", "verdict"]
    table = tabulate(sel[columns].head(12).values.tolist(),
                     headers=["t", "max_abs", "max_rel", "max_ulp", "x tol", "noise floor",
                              "verdict"],
                     floatfmt=".2e")
    return head + "\n" + table
