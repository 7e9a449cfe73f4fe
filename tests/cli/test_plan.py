"""One plan for the three front doors (harness/plan.py): ``rnn-harness run``, ``harness.check``
and the pytest plugin hand the same request to :func:`harness.plan.plan` and get the same
adapters on the same device. By default the devices this machine has, so the plugin collects
no GPU item on a machine without a GPU unless asked; ``all`` leaves the named-only adapters
out, ``every`` brings them in; names run whatever their device.

The GPU is stood in for (:func:`harness.gpus.gpu_present`), so each test says the same on a CPU
machine and on a GPU runner. Nothing runs: the runner is a stand-in that stops each door at the
plan, and the plugin only collects (in this process, ``pytester``)."""

from __future__ import annotations

import importlib.metadata
import shutil

import pytest

import harness
from harness import adapters as registry
from harness import gpus, pytest_plugin, runner
from harness import plan as planning
from harness.bundled import bundled_cases
from harness.cli import main
from harness.errors import HarnessError
from harness.plan import Request, plan

pytest_plugins = ["pytester"]

# absolute: pytester runs each test in a folder of its own
CASE = str(bundled_cases() / "reverse.yaml")
GPU = {a.name for a in registry.ADAPTERS.values() if a.device == "gpu" and not a.baseline}
NAMED_ONLY = {a.name for a in registry.ADAPTERS.values() if a.named_only is not None}


class _Planned(Exception):
    """Raised by the stand-in runner: the door has planned, nothing runs."""


@pytest.fixture
def plans(monkeypatch) -> list:
    """Every plan a door makes, in order; the runner stops each door there."""
    made: list = []

    def spy(request: Request):
        made.append(real(request))
        return made[-1]

    def stop(*_, **__):
        raise _Planned

    real = planning.plan
    monkeypatch.setattr(planning, "plan", spy)
    monkeypatch.setattr(runner, "run", stop)
    return made


def _gpu(monkeypatch, present: bool) -> None:
    monkeypatch.setattr(gpus, "gpu_present", lambda: present)


def _pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in ``pytester``'s folder, in this process (tests/project/test_plugin_collection.py
    says why)."""
    installed = any(ep.name == pytest_plugin.PLUGIN_NAME
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    extra = [] if installed else ["-p", "harness.pytest_plugin"]
    # hypothesis's plugin writes its statistics at the end of each session: a second each
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                                        *extra, "--collect-only", "-q", *args)


def _items(got: pytest.RunResult) -> list[str]:
    """The adapters of the collected items (``file::case::adapter``)."""
    return [line.split("::")[-1] for line in got.stdout.lines if line.count("::") == 2]


def _names(p) -> list[str]:
    return [a.name for a in p.adapters]


@pytest.mark.parametrize("present", [False, True])
def test_the_three_doors_plan_the_same_by_default(plans, monkeypatch, pytester, tmp_path,
                                                  present):
    _gpu(monkeypatch, present)
    with pytest.raises(_Planned):
        main(["run", CASE, "--quiet", "--out", str(tmp_path / "r")])
    with pytest.raises(_Planned):
        harness.check(CASE)
    shutil.copy(CASE, pytester.path / "reverse.yaml")
    got = _pytest(pytester, "reverse.yaml")
    assert got.ret == 0, got.stdout.str()
    assert len(plans) == 3  # one each: the plugin plans once (a case file's: Plan.for_cases)
    cli, api, plugin = plans
    assert {(p.request.adapters, p.request.device, p.request.require_gpu) for p in plans} \
        == {(None, None, False)}
    plugin = plugin.for_cases(cli.request.cases)
    assert _names(cli) == _names(api) == _names(plugin)
    assert cli.device == api.device == plugin.device == ("all" if present else "cpu")
    assert cli.named == api.named == plugin.named == frozenset()
    assert bool(GPU & set(_names(cli))) is present
    # the plugin's items: the plan's adapters but the baseline, on each of the file's 2 cases
    items = _items(got)
    assert sorted(items) == sorted(2 * [a.name for a in plugin.adapters if not a.baseline
                                        and a.named_only is None])
    assert ("rnn-harness: no GPU here: GPU adapters not selected (--rnn-device all reports "
            "them)" in got.stdout.str()) is not present


def test_the_plugin_collects_no_gpu_item_of_the_bundled_cases_without_a_gpu(
        monkeypatch, pytester):
    _gpu(monkeypatch, False)
    shutil.copytree(bundled_cases(), pytester.path / "cases")
    items = _items(_pytest(pytester, "cases"))
    assert len(items) > 400  # every bundled case file was collected
    assert [i for i in items if i in GPU] == []


@pytest.mark.parametrize("asked", [["--rnn-device", "gpu"], ["--rnn-device", "all"],
                                   ["--rnn-require-gpu"], ["--rnn-adapters", "torch-cudnn"]])
def test_the_plugin_collects_the_gpu_items_when_asked(monkeypatch, pytester, asked):
    _gpu(monkeypatch, False)
    shutil.copy(CASE, pytester.path / "reverse.yaml")
    items = _items(_pytest(pytester, "reverse.yaml", *asked))
    gpu = [i for i in items if i in GPU]
    expected = {"torch-cudnn"} if "--rnn-adapters" in asked else GPU
    assert sorted(gpu) == sorted(2 * [n for n in expected if n not in NAMED_ONLY])
    assert gpu


def test_the_device_rule(monkeypatch):
    _gpu(monkeypatch, False)
    assert plan(Request()).device == "cpu"
    assert plan(Request(adapters="every")).device == "cpu"  # a selection, as all
    assert plan(Request(adapters="all,torch-cudnn")).device == "cpu"
    assert plan(Request(adapters="reference,torch-cudnn")).device == "all"  # named: not dropped
    assert plan(Request(require_gpu=True)).device == "all"
    assert plan(Request(device="gpu")).device == "gpu"  # given: as given
    assert plan(Request()).note == ("no GPU here: GPU adapters not selected (--device all "
                                    "reports them)")
    assert "(device='all' reports them)" in plan(Request(device_field="device")).note
    assert "torch-cudnn" in _names(plan(Request(adapters="reference,torch-cudnn")))
    assert not GPU & set(_names(plan(Request())))
    _gpu(monkeypatch, True)
    machine = plan(Request())
    assert machine.device == "all" and machine.note == "" and GPU <= set(_names(machine))


def test_the_named_only_rule_and_every(monkeypatch):
    _gpu(monkeypatch, False)
    default = plan(Request())
    assert not NAMED_ONLY & set(_names(default))
    assert set(default.left_out) == {n for n in NAMED_ONLY
                                     if registry.ADAPTERS[n].device == "cpu"}
    assert _names(plan(Request(adapters=["all"]))) == _names(default)
    beside = plan(Request(adapters="all,torch-compile"))
    assert "torch-compile" in _names(beside) and beside.named == {"torch-compile"}
    # named by a case: selected, named by no one (it runs on that case only)
    case = harness.make_case(CASE, name="reverse-lstm", adapters=["reference", "torch-compile"])
    by_case = plan(Request(cases=[case]))
    assert "torch-compile" in _names(by_case) and by_case.named == frozenset()
    assert _names(default.for_cases([case])) == _names(by_case)
    every = plan(Request(adapters="every"))
    assert set(_names(every)) == {a.name for a in registry.ADAPTERS.values()
                                  if a.device == "cpu" or a.baseline}
    assert every.named == frozenset(registry.ADAPTERS) and every.left_out == {}


def test_check_brings_in_a_named_only_adapter_its_case_names(plans, monkeypatch):
    """As ``run`` does (check() used to leave it out), on that case only: named by no one."""
    _gpu(monkeypatch, False)
    case = harness.make_case(CASE, name="reverse-lstm", adapters=["reference", "torch-compile"])
    with pytest.raises(_Planned):
        harness.check(case)
    assert "torch-compile" in _names(plans[0]) and plans[0].named == frozenset()


def test_bad_requests_are_refused_naming_the_doors_argument(plans):
    with pytest.raises(HarnessError) as err:
        Request(adapters="torch-cpuu")
    assert str(err.value).startswith("--adapters: unknown adapter 'torch-cpuu' (did you mean "
                                     "'torch-cpu'"), str(err.value)
    with pytest.raises(HarnessError) as err:
        harness.check(CASE, adapters=["torch-cpuu"])
    assert str(err.value).startswith("adapters: unknown adapter 'torch-cpuu' (did you mean "
                                     "'torch-cpu'"), str(err.value)
    with pytest.raises(HarnessError, match="^device: expected one of cpu, gpu, all, got 'tpu'"):
        harness.check(CASE, device="tpu")
    with pytest.raises(HarnessError, match="^--adapters: expected adapter names .* got none"):
        Request(adapters=" ")
    with pytest.raises(HarnessError, match="^adapters: reference named more than once"):
        harness.check(CASE, adapters=["reference", "reference"])
    assert plans == []  # refused before any plan


def test_the_plugin_refuses_an_unknown_adapter_as_a_usage_error(pytester):
    got = _pytest(pytester, "--rnn-adapters", "torch-cpuu")
    assert got.ret == pytest.ExitCode.USAGE_ERROR
    assert "--rnn-adapters: unknown adapter 'torch-cpuu' (did you mean 'torch-cpu'" \
        in got.stderr.str()
