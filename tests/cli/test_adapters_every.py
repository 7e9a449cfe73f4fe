"""``every``: every adapter that can run here, the named-only ones (left out of the default
selection for cost) included, in ``run --adapters``, ``harness.check(adapters=)`` and the
plugin's ``--rnn-adapters``; ``all`` stays the default selection. Tested through the plan each
front door hands the runner, never by running the costly adapters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import harness
from harness import adapters as registry
from harness import runner
from harness.cli import main
from harness.errors import HarnessError
from harness.pairs import selected_by_case

CASE = "cases/reverse.yaml"
CPU = [a.name for a in registry.ADAPTERS.values() if a.device == "cpu" or a.baseline]
NAMED_ONLY_CPU = [a.name for a in registry.ADAPTERS.values()
                  if a.named_only is not None and a.device == "cpu"]


class _Planned(Exception):
    """Raised by the stand-in runner with what it was handed: nothing runs."""


@pytest.fixture
def planned(monkeypatch) -> dict:
    """What the front door hands :func:`harness.runner.run`: the adapters and the options."""
    seen: dict = {}

    def plan(cases, chosen, options, **_):
        seen.update(cases=cases, chosen=[a.name for a in chosen], options=options)
        raise _Planned

    monkeypatch.setattr(runner, "run", plan)
    return seen


def test_every_selects_the_named_only_adapters_too_and_all_stays_the_default():
    assert len(NAMED_ONLY_CPU) >= 10  # torch-compile, executorch, litert-torch, ...
    default = [a.name for a in registry.select(None, "cpu")]
    assert [a.name for a in registry.select(["all"], "cpu")] == default
    assert not set(NAMED_ONLY_CPU) & set(default)
    every = [a.name for a in registry.select(["every"], "cpu")]
    assert every == CPU  # in the registry's order, the named-only ones among them
    assert registry.left_out(registry.select(["every"], "cpu"), "cpu") == {}
    # a named-only adapter named by `every` runs on every case, not only where a case names it
    assert registry.named_explicitly(["every"]) == frozenset(registry.ADAPTERS)
    assert registry.named_explicitly(["all", "torch-compile"]) == {"torch-compile"}
    case = harness.make_case(CASE, name="reverse-lstm")
    compile_ = registry.ADAPTERS["torch-compile"]
    assert selected_by_case(case, compile_, registry.named_explicitly(["every"]))
    assert not selected_by_case(case, compile_, registry.named_explicitly(["all"]))


def test_run_adapters_every_plans_every_cpu_adapter_on_every_case(planned, tmp_path):
    with pytest.raises(_Planned):
        main(["run", CASE, "--adapters", "every", "--device", "cpu", "--quiet",
              "--out", str(tmp_path / "r")])
    assert planned["chosen"] == CPU
    assert planned["options"].named == frozenset(registry.ADAPTERS)


def test_run_adapters_every_without_device_takes_this_machines_devices(planned, monkeypatch,
                                                                       tmp_path):
    """As ``all``: not the "named one by one" rule that runs every device's adapters."""
    from harness import gpus

    monkeypatch.setattr(gpus, "gpu_present", lambda: False)
    with pytest.raises(_Planned):
        main(["run", CASE, "--adapters", "every", "--quiet", "--out", str(tmp_path / "r")])
    assert planned["chosen"] == CPU
    assert planned["options"].device == "cpu"


def test_a_misspelled_every_is_refused_with_the_selections_among_the_known(capsys):
    assert main(["run", CASE, "--adapters", "evry"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rnn-harness: error: --adapters: unknown adapter 'evry' "
                          "(did you mean 'every'?); known: all, every, reference,"), err
    assert len(err.splitlines()) == 1


def test_check_adapters_every_plans_every_cpu_adapter(planned, monkeypatch):
    from harness import gpus

    monkeypatch.setattr(gpus, "gpu_present", lambda: False)  # the devices of a CPU machine
    with pytest.raises(_Planned):
        harness.check(CASE, name="reverse-lstm", adapters="every")
    assert planned["chosen"] == CPU
    with pytest.raises(_Planned):
        harness.check(CASE, name="reverse-lstm", adapters=["all"])
    assert not set(NAMED_ONLY_CPU) & set(planned["chosen"])


@pytest.mark.parametrize("empty", [[], (), ""])
def test_check_refuses_an_empty_adapter_list(planned, empty):
    """An empty list is a mistake, not "the default selection": refused before anything
    runs, naming the argument."""
    with pytest.raises(HarnessError) as err:
        harness.check(CASE, name="reverse-lstm", adapters=empty)
    assert str(err.value).startswith("adapters: expected adapter names"), str(err.value)
    assert planned == {}


def test_the_adapters_command_says_every_runs_the_named_only_ones(capsys):
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    note = out.split("Left out of the default selection (--adapters all) and run when named: "
                     "in --adapters, in a case's adapters:,\nor all at once with --adapters "
                     "every:\n")[1]
    listed = [line.split(":")[0].strip() for line in note.splitlines() if line.startswith("  ")
              and not line.startswith("    ")]
    assert listed == [a.name for a in registry.ADAPTERS.values() if a.named_only is not None]


class _Options:
    """What the plugin reads of pytest's config: its options' values, the command line (to
    spell an option as it was given) and the stash its plan is kept in."""

    def __init__(self, **values: str | None) -> None:
        self.values = {"rnn_device": None, "rnn_require_gpu": False, **values}
        self.invocation_params = SimpleNamespace(args=())
        self.stash: dict = {}

    def getoption(self, dest: str) -> str | None:
        return self.values[dest]


def test_the_plugins_rnn_adapters_every_selects_the_named_only_adapters_on_every_case():
    """What the plugin's collection pairs each case with (a pytest run on the command line
    costs seconds: tests/project/test_pytest_plugin.py runs it)."""
    from harness.pytest_plugin.options import planned

    case = harness.make_case(CASE, name="reverse-lstm")
    plan = planned(_Options(rnn_adapters="every", rnn_device="cpu")).for_cases([case])
    assert [a.name for a in plan.adapters] == CPU
    runs = [a.name for a in plan.adapters if selected_by_case(case, a, plan.named)]
    assert set(NAMED_ONLY_CPU) <= set(runs)
    default = planned(_Options(rnn_adapters="all", rnn_device="cpu")).for_cases([case])
    assert not set(NAMED_ONLY_CPU) & {a.name for a in default.adapters}


def test_the_plugin_refuses_an_rnn_adapters_that_names_nothing():
    from harness.pytest_plugin.options import request

    with pytest.raises(HarnessError, match="expected comma-separated adapter names"):
        request(_Options(rnn_adapters=" , ", rnn_device="cpu"))
