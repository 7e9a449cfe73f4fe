"""The collection tree: a case file (:class:`CaseFile`), a node per case (:class:`CaseNode`),
an item per adapter (:class:`PairItem`); a case file that cannot be loaded is one failing
:class:`LoadError` item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.pytest_plugin.messages import failure_text, pair_properties
from harness.pytest_plugin.options import planned

LOAD_ITEM = "load"  # the item of a case file that cannot be loaded


class ConformanceFailure(Exception):
    """A pair's failure, shown as its message alone (no traceback)."""


class CaseFile(pytest.File):
    """A case file: a :class:`CaseNode` per case (a ``matrix:`` expands to several), or the
    one failing :class:`LoadError` item when the file cannot be loaded.

    ``found_in``: the folder named on the command line whose walk found the file, loaded under
    ``run``'s rule for such files (:func:`harness.cases.load_found`: no link leading outside
    it is followed); None for a file named itself (:func:`harness.cases.load_named`)."""

    def __init__(self, *, found_in: Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.found_in = found_in

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from harness.cases import load_found, load_named
        from harness.errors import HarnessError

        base = planned(self.config)
        try:
            cases = (load_named(self.path) if self.found_in is None
                     else load_found(self.path, self.found_in))
            plan = base.for_cases(cases)  # an unknown adapter name in a case is refused here
        except HarnessError as exc:
            yield LoadError.from_parent(self, name=LOAD_ITEM, error=exc)
            return
        from harness.pairs import selected_by_case

        adapters = [a for a in plan.adapters if not a.baseline]
        for case in cases:
            mine = [a for a in adapters
                    if a.named_only is None or selected_by_case(case, a, plan.named)]
            yield CaseNode.from_parent(self, name=case.name, case=case, adapters=mine)


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
            from harness.case_yaml import field_line

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
                self._prepared = prepare(self.case, device=planned(self.config).device)
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
        from harness.pairs import run_pair

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
        # the run decides what is a known upstream bug (harness.judges.known.apply): an xfail
        # while it shows, a failure once it looks fixed, so the stale expectation is removed
        if r.status == compare.KNOWN_BUG:
            pytest.xfail(r.reason)
        if r.status == compare.LOOKS_FIXED:
            raise ConformanceFailure(f"looks fixed: {r.reason}")
        if r.status == compare.DIVERGED:
            raise ConformanceFailure(failure_text(r))
        if r.status != compare.PASS:  # a status added to the harness and not taught here
            raise ConformanceFailure(f"status {r.status!r}: the plugin does not know it; a "
                                     f"pair passes only as {compare.PASS!r}")

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
