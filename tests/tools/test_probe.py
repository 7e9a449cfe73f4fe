"""``rnn-harness probe``: every CPU adapter's layout, measured, equals the declared one.

The registry is iterated, so an adapter added later is probed too. Each adapter is probed on an
LSTM with every stored feature it declares (peepholes, projection, a forget bias), a GRU in each
reset variant it runs, and a bidirectional LSTM; sizes are tiny (H 2-3, I 2) because a probe
costs one framework run per native entry. A deliberately wrong declaration must fail.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness import isolation
from harness.adapters import ADAPTERS
from harness.adapters.torch_cpu import TorchCPU
from harness.cli import main
from harness.layouts import get_layout
from harness.layouts.torch import TORCH
from harness.probe import probe, render
from harness.spec import Case

CPU = [a for a in ADAPTERS.values() if a.device == "cpu"]
# Each probe run of these adapters is an export (torchscript ~0.1 s, dynamo 2-3 s) of the torch
# layout torch-cpu's probe measures: torchscript probes its LSTM case here, dynamo is probed by
# hand (`rnn-harness probe --adapter torch-onnx-dynamo`: 49 exports, about 2 minutes). Each of
# openvino's is a compile_model (50-100 ms): its LSTM case here (2-3 s), the onnx layout's GRU
# and bidirectional cases are onnxruntime's and onnx-reference's (openvino's by hand: 13 s).
EXPORTING = {"torch-onnx-torchscript": 1, "torch-onnx-dynamo": 0, "openvino": 1}
# torch-compile compiles per run (tens of seconds) the very nn.LSTM/nn.GRU state_dict (layout
# torch) torch-cpu's probe measures; keras3-openvino compiles each eager op with OpenVINO (1-3 s
# a run) the keras layout keras and keras3 probe in full: by hand
# (`rnn-harness probe --adapter keras3-openvino`).
EXPORTING |= {"torch-compile": 0, "keras3-openvino": 0}
# litert-torch converts per run (3-10 s: torch.export and the TFLite converter) the same torch
# state_dict: by hand, `rnn-harness probe --adapter litert-torch --case-sizes` on an LSTM and a
# GRU of I 2, H 1 (I != H: transposes show): 21 + 16 conversions in 4 minutes, both layouts
# measured as declared.
EXPORTING |= {"litert-torch": 0}
# Each probe run of these is a conversion or a compile of a few tenths of a second (LiteRT's
# converter; XLA in keras3-jax's own process), or a Keras 3 layer built eagerly (keras3: 15 s
# for its four cases), of the keras layout that keras probes in full: here one LSTM of hidden
# size 1 (17 runs; transposes still show, as I differs from H).
# By hand, at the default sizes: litert-tf-keras 73 conversions in 29 s, keras3-jax 73 runs in
# 27 s.
ONE_SMALL_LSTM = ("keras3", "litert-tf-keras", "litert-keras3", "keras3-jax", "keras3-torch")
# probed here: the CPU adapters but those run only when named (as the capability contract: run
# by name, by hand) and those whose every probe run is an export (probed by hand, above)
PROBED = [a for a in CPU if a.named_only is None and EXPORTING.get(a.name) != 0]


def probe_cases(adapter) -> list[Case]:
    caps = adapter.capabilities
    lstm = dict(cell="lstm", input_size=2, hidden_size=3 if caps.projection else 2)
    if caps.peepholes:
        lstm["peepholes"] = True
    if caps.projection:
        lstm["proj_size"] = 2
    if caps.forget_bias:
        lstm["forget_bias"] = 1.0
    cases = [Case(name="probe-lstm", **lstm)]
    cases += [Case(name=f"probe-gru-{ra}", cell="gru", input_size=2, hidden_size=2,
                   reset_after=ra) for ra in sorted(caps.gru_reset_after)]
    cases.append(Case(name="probe-bi", cell="lstm", input_size=2, hidden_size=2,
                      bidirectional=True))
    return [c for c in cases if adapter.not_applicable_reason(c) is None]


def test_the_default_selections_cpu_adapters_are_probed() -> None:
    """Only the exporting adapters of the default selection are left to a probe by hand."""
    default = {a.name for a in CPU if a.named_only is None}
    assert default <= {a.name for a in PROBED}, default - {a.name for a in PROBED}
    assert len(PROBED) >= 15


@pytest.mark.parametrize("adapter", PROBED, ids=lambda a: a.name)
def test_measured_layout_is_the_declared_one(adapter) -> None:
    reason = isolation.unavailable_reason(adapter)  # where it runs (its own process, if any)
    if reason:
        pytest.skip(reason)
    cases = probe_cases(adapter)
    if adapter.name in ONE_SMALL_LSTM:
        cases = [Case(name="probe-lstm-h1", cell="lstm", input_size=2, hidden_size=1,
                      forget_bias=1.0)]
    assert cases, f"{adapter.name} runs none of the probe cases"
    if adapter.name in EXPORTING:
        cases = cases[:EXPORTING[adapter.name]]
    for case in cases:
        result = probe(adapter, case)
        assert result.ok, render(result)
        n = sum(len(t.placements) for t in (adapter.layout or get_layout("canonical")).tensors(
            result.case))
        assert len(result.rows) == n and result.runs == len(result.entries) + 1
        # every entry that holds something measurably moves the outputs
        assert all(e.measured for e in result.entries if e.declared)


def test_a_wrong_declaration_fails() -> None:
    """torch-cpu declared with i and f swapped in weight_ih: the probe names the entries."""
    def swapped(case, layer, d):
        tensors = TORCH.describe(case, layer, d)
        w = tensors[0]
        pls = list(w.placements)
        pls[0], pls[1] = (pls[0]._replace(sources=pls[1].sources),
                          pls[1]._replace(sources=pls[0].sources))
        return [replace(w, placements=tuple(pls))] + tensors[1:]

    class Wrong(TorchCPU):
        name = "torch-wrong"

        @property
        def layout(self):
            return replace(TORCH, name="torch-wrong", describe=swapped)

    adapter = Wrong()
    if adapter.unavailable_reason():
        pytest.skip(adapter.unavailable_reason())
    result = probe(adapter, Case(name="w", cell="lstm", input_size=2, hidden_size=2))
    assert not result.ok
    bad = [e for e in result.entries if not e.ok]
    assert {e.tensor for e in bad} == {"weight_ih_l0"} and len(bad) == 8
    text = render(result)
    assert "DIFFERS" in text and "8 difference(s)" in text


def test_runtime_facts_are_measured() -> None:
    """tf-block adds forget_bias at run time; torch stores it in bias_ih."""
    case = Case(name="fb", cell="lstm", input_size=2, hidden_size=2, forget_bias=1.0)
    for name, words in (("tf-block", "added at run time"), ("torch-cpu", "stored in a bias")):
        a = ADAPTERS.get(name)
        if a is None or a.unavailable_reason():
            continue
        facts = {f[0]: f for f in probe(a, case).facts}
        assert facts["forget_bias 1"][2] == words


def test_cli_probe(capsys) -> None:
    if ADAPTERS["torch-cpu"].unavailable_reason():
        pytest.skip("torch unavailable")
    assert main(["probe", "--adapter", "torch-cpu"]) == 0
    out = capsys.readouterr().out
    assert "the measured layout is the declared one" in out
    assert "| weight_hh_l0 | [2H:3H, :] | R_g" in out


class Recorder(list):
    """A progress display that keeps what it is told: plain lines, and in-place ones."""

    def __init__(self) -> None:
        super().__init__()
        self.live: list[str] = []

    def __call__(self, line: str) -> None:
        self.append(line)

    def started(self, line: str) -> None:
        self.live.append(line)

    def close(self) -> None:
        self.live.append("(closed)")


def test_probe_runs_at_small_sizes_with_progress(monkeypatch, capsys, tmp_path) -> None:
    """Issue 32: a probe at a case's real sizes took 120 s in silence. It now runs at small
    sizes (the layout does not depend on them), says so, and tells a progress display the runs
    done and the time left; ``--case-sizes`` keeps the case's sizes."""
    from harness import probe as probe_module
    from harness.probe import probe_case

    adapter = ADAPTERS["reference"]
    case = Case(name="big", cell="lstm", input_size=5, hidden_size=7, proj_size=4, num_layers=3,
                bidirectional=True, peepholes=True)
    small = probe_case(case, adapter)
    assert (small.input_size, small.hidden_size, small.proj_size, small.num_layers) == (2, 3, 2, 2)
    assert (small.bidirectional, small.peepholes, small.cell) == (True, True, "lstm")
    own = probe_case(case, adapter, case_sizes=True)
    assert (own.input_size, own.hidden_size, own.proj_size, own.num_layers) == (5, 7, 4, 3)

    monkeypatch.setattr(probe_module, "PLAIN_EVERY", 0.0)  # a plain line per run
    shown = Recorder()
    result = probe(adapter, Case(name="gru", cell="gru", input_size=4, hidden_size=5),
                   progress=shown)
    assert result.ok and result.case.hidden_size == 3
    assert result.runs == 1 + 3 * 3 * (2 + 3 + 2)  # the base, r z n x H x (I + H + 2 biases)
    assert shown[0] == (f"probe reference on gru (I=2 H=3, 1 layer(s)): {result.runs} "
                        "framework runs")
    assert shown[-1].startswith(f"probe reference on gru: [{result.runs}/{result.runs}] runs (")
    assert shown[-1].endswith(" so far, ~0s left)") and "s left)" in shown[len(shown) // 2]
    assert shown.live[-1] == "(closed)"
    assert "Probed at small sizes (the case: I=4 H=5, 1 layer(s))" in render(result)

    file = tmp_path / "case.yaml"
    file.write_text("name: tiny\ncell: gru\ninput_size: 2\nhidden_size: 3\n")
    assert main(["probe", "--adapter", "reference", "--case", str(file), "--case-sizes"]) == 0
    out, err = capsys.readouterr()
    assert "probe reference on tiny (I=2 H=3, 1 layer(s)): 64 framework runs" in err
    assert "the measured layout is the declared one" in out and "Probed at small" not in out
