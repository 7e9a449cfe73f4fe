"""Why a GPU pair diverged (``harness/attribution.py``): a DIVERGED pair of a GPU adapter that
declares rerun variants is rerun with each, and its reason says which change brought it within
tolerance. Tested on CPU with stand-in adapters (``fault_adapters.Offset``: the reference plus
an offset) standing in for a GPU adapter and its variants; no real adapter's output is faked.
"""

from __future__ import annotations

import json

import pytest
from support.case_factory import case_maker
from support.fault_adapters import Offset

from harness import adapters as registry
from harness import attribution, compare, runner
from harness.adapters.reference import Reference
from harness.report import write_report

CASE = case_maker(seed=3, dtype="float32")()
OFF, ON = 0.0, 1e-2  # an offset within float32 tolerance, and one far beyond it


def offset_adapter(name: str, offset: float, device: str = "cpu",
                   reruns: tuple[tuple[str, str], ...] = ()) -> Offset:
    cls = type(name, (Offset,), {"name": name, "offset": offset, "device": device,
                                 "reruns": reruns})
    return cls()


def run_gpu_stand_in(monkeypatch, tf32_off: float, cpu: float, gpu: float = ON):
    """A stand-in GPU adapter (offset ``gpu``) whose variants are TF32 off and the CPU build
    (offsets ``tf32_off``, ``cpu``); the pair's result."""
    variants = [offset_adapter("stand-in-tf32-off", tf32_off, "gpu"),
                offset_adapter("stand-in-cpu", cpu)]
    for v in variants:
        monkeypatch.setitem(registry.ADAPTERS, v.name, v)
    gpu_adapter = offset_adapter("stand-in-gpu", gpu, "gpu", reruns=(
        (attribution.CPU, "stand-in-cpu"), (attribution.TF32_OFF, "stand-in-tf32-off")))
    result = runner.run([CASE], [Reference(), gpu_adapter])
    return result, result.pairs[-1]


@pytest.mark.parametrize(("tf32_off", "cpu", "text"), [
    (OFF, OFF, attribution.FOLLOWS[attribution.TF32_OFF]),
    (ON, OFF, attribution.FOLLOWS[attribution.CPU]),
    (ON, ON, attribution.PERSISTS),
])
def test_a_diverged_gpu_pair_names_its_cause(monkeypatch, tmp_path, tf32_off, cpu, text):
    result, pair = run_gpu_stand_in(monkeypatch, tf32_off, cpu)
    assert pair.status == compare.DIVERGED
    assert pair.attribution == text
    out = write_report(result, tmp_path, plots="none")
    assert text in (out / "summary.md").read_text()
    pairs = json.loads((out / "run.json").read_text())["pairs"]
    assert [p.get("attribution") for p in pairs if p["adapter"] == "stand-in-gpu"] == [text]


def test_the_three_texts():
    assert attribution.FOLLOWS[attribution.TF32_OFF] == \
        "follows TF32: within tolerance with TF32 off"
    assert attribution.FOLLOWS[attribution.CPU] == \
        "follows cuDNN's float32 arithmetic: the CPU build is within tolerance"
    assert attribution.PERSISTS == "persists on CPU: a layout or semantics mistake"


def test_no_attribution_when_it_passes_or_is_not_a_gpu_adapter(monkeypatch):
    _, passing = run_gpu_stand_in(monkeypatch, OFF, OFF, gpu=OFF)
    assert passing.status == compare.PASS and passing.attribution == ""
    cpu_adapter = offset_adapter("stand-in-cpu-only", ON, "cpu",
                                 reruns=((attribution.CPU, "reference"),))
    pair = runner.run([CASE], [Reference(), cpu_adapter]).pairs[-1]
    assert pair.status == compare.DIVERGED and pair.attribution == ""


def test_a_variant_that_cannot_run_is_named(monkeypatch):
    gpu_adapter = offset_adapter("stand-in-gpu", ON, "gpu",
                                 reruns=((attribution.TF32_OFF, "no-such-adapter"),))
    pair = runner.run([CASE], [Reference(), gpu_adapter]).pairs[-1]
    assert pair.attribution.startswith("cause not attributed: could not rerun with TF32 off")
    assert "no-such-adapter" in pair.attribution


def test_declared_kinds_are_checked():
    with pytest.raises(ValueError, match="unknown rerun kind"):
        attribution.reruns([("faster", "torch-cpu")])


def test_declared_reruns_name_registered_adapters_of_known_kinds():
    declared = {a.name: attribution.reruns(a.reruns) for a in registry.ADAPTERS.values()
                if a.reruns}
    assert declared["torch-cudnn-tf32"][0] == attribution.Rerun(attribution.TF32_OFF,
                                                                "torch-cudnn")
    for name, reruns in declared.items():
        assert registry.get_adapter(name).device == "gpu", name
        for r in reruns:
            assert registry.get_adapter(r.adapter).name == r.adapter
