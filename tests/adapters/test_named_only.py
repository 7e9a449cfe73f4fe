"""Adapters left out of the default selection for cost (``Adapter.named_only``): no ``--adapters``
(or ``all``) leaves them out, unless named there beside ``all`` or in a case's ``adapters:``; a
named-only adapter runs on a case only when named on the command line or by that case; the
``adapters`` command and the report say why ("run when named: ...").

A stand-in: ``reference`` under another name, marked named-only, in a registry of three."""

from __future__ import annotations

import json

import pytest
from support.case_factory import case_maker

from harness import adapters as registry
from harness import compare, prepare, runner
from harness.adapters.reference import Reference
from harness.cli import main
from harness.pairs import run_pair
from harness.report import write_report
from harness.run_options import RunOptions

WHY = "stands in for a compile per case: seconds a case"


class Costly(Reference):
    name = "costly"
    baseline = False  # judged against the reference, as any adapter
    named_only = WHY


make = case_maker(seed=3, dtype="float64", input_size=2, hidden_size=3, batch=2, seq_len=4)


@pytest.fixture
def small_registry(monkeypatch) -> dict:
    keep = {n: registry.ADAPTERS[n] for n in ("reference", "noise-floor")} | {"costly": Costly()}
    monkeypatch.setattr(registry, "ADAPTERS", keep)
    monkeypatch.setattr(prepare, "baseline_arrays", lambda device: None)  # baseline: NumPy
    return keep


def names(chosen) -> list[str]:
    return [a.name for a in chosen]


def test_default_selection_leaves_named_only_out_unless_named(small_registry):
    assert names(registry.select(None)) == ["reference", "noise-floor"]
    assert names(registry.select(["all"])) == ["reference", "noise-floor"]
    assert names(registry.select(["all", "costly"])) == ["reference", "noise-floor", "costly"]
    assert names(registry.select(["reference", "costly"])) == ["reference", "costly"]
    named_by_case = [make(name="a", adapters=["reference", "costly"])]
    assert "costly" in names(registry.select(None, "cpu", named_by_case))
    assert registry.left_out(registry.select(None)) == {"costly": WHY}
    assert registry.left_out(registry.select(["all", "costly"])) == {}


def test_named_only_runs_on_the_cases_that_name_it(small_registry):
    cases = [make(name="names-it", adapters=["reference", "costly"]), make(name="does-not")]
    chosen = registry.select(None, "cpu", cases)
    # named by no one on the command line: only the case that names it has a pair
    result = runner.run(cases, chosen, RunOptions(named=frozenset()))
    pairs = {(p.case, p.adapter): p.status for p in result.pairs}
    assert pairs[("names-it", "costly")] == compare.PASS
    assert ("does-not", "costly") not in pairs
    # named on the command line: every case
    result = runner.run(cases, chosen, RunOptions(named=frozenset({"costly"})))
    assert {p.case for p in result.pairs if p.adapter == "costly"} == {"names-it", "does-not"}
    # run_pair asked directly for a case that does not name it, with the command line's names
    r = run_pair(prepare.prepare(cases[1]), small_registry["costly"], named=frozenset())
    assert r.status == compare.NOT_APPLICABLE and f"runs when named: {WHY}" in r.reason


def test_adapters_command_and_report_say_run_when_named(small_registry, capsys, tmp_path):
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    assert f"  costly: run when named: {WHY}" in out
    assert main(["adapters", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["costly"]["named_only"] == WHY

    cases = [make(name="plain")]
    chosen = registry.select(None, "cpu", cases)
    result = runner.run(cases, chosen, RunOptions(named=frozenset()))
    assert result.left_out == {"costly": WHY}
    out = write_report(result, tmp_path / "r")
    assert json.loads((out / "run.json").read_text())["left_out"] == {"costly": WHY}
    assert f"run when named: {WHY}" in (out / "index.html").read_text()
