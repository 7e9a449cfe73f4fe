"""The PyTorch -> ONNX -> ONNX Runtime adapters (``torch-onnx-dynamo``, ``torch-onnx-torchscript``)
and the two published exporter bugs, with the installed torch / onnxscript.

- pytorch#191855 (a frozen sequence length): with torch 2.13 an nn.LSTM exported right after
  another nn.LSTM in the same process has its declared-dynamic time axis frozen at the example's
  length. The adapter forgets the previous export before each (so no bundled case depends on
  the order cases run in); the test exports twice without that and checks the pair is an error
  row naming the frozen axis, not a crash.
- pytorch#189225 / onnxscript#2852 (nn.GRU written with ``linear_before_reset=0``): fixed in the
  installed versions (the dynamo exporter writes 1, checked here). Its mechanism is planted: the
  exported GRU node rewritten to ``linear_before_reset=0`` must come out DIVERGED, with where.

Exports cost seconds each (the dynamo exporter 1.5-5 s): few, small cases.
"""

from __future__ import annotations

import pytest
from support.runnable import runnable

from harness import compare
from harness.adapters import get_adapter
from harness.adapters.base import AdapterFault
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.onnx

SMALL = dict(input_size=3, hidden_size=4, batch=2, seq_len=4, initial_state="random",
             dtype="float32", seed=3)


@pytest.mark.roads  # two dynamo exports: the nightly's (torch-onnx-dynamo runs when named)
def test_frozen_length_of_a_second_export_is_an_error_row(monkeypatch):
    """pytorch#191855, as torch 2.13 has it: the second export of an nn.LSTM in a process."""
    import torch

    from harness.adapters.torch_onnx_dynamo import forget_previous_exports

    adapter = runnable("torch-onnx-dynamo")
    prep = prepare(Case(name="frozen", cell="lstm", **SMALL))
    forget_previous_exports(torch)  # whatever ran before: this is the process's first export
    monkeypatch.setattr(adapter, "forget_previous", False)
    first = run_pair(prep, adapter)
    second = run_pair(prep, adapter)
    assert first.status == compare.PASS, first.reason
    assert second.status == compare.ERROR
    assert "froze input 'x': axis 1 at 2 (the case has 4)" in second.reason
    assert "pytorch/pytorch#191855" in second.reason
    # with the adapter's own forgetting the next export is dynamic again: the bundled cases'
    # conformance items, run one after another in a process, show it


@pytest.mark.roads  # a dynamo export: the nightly's (torch-onnx-dynamo runs when named)
def test_planted_gru_linear_before_reset_0_diverges_with_where(monkeypatch):
    """pytorch#189225 / onnxscript#2852: fixed here (the export writes 1); rewritten to 0, the
    harness must say DIVERGED and where."""
    adapter = runnable("torch-onnx-dynamo")
    written = []
    export = adapter.export

    def planted(case, native):
        model = export(case, native)
        for node in model.graph.node:
            if node.op_type == "GRU":
                for attr in node.attribute:
                    if attr.name == "linear_before_reset":
                        written.append(attr.i)
                        attr.i = 0
        return model

    monkeypatch.setattr(adapter, "export", planted)
    r = run_pair(prepare(Case(name="gru-lbr", cell="gru", **SMALL)), adapter)
    # one export for the run, one for step mode's one-step runs (the step-local finding)
    assert written and set(written) == {1}, f"the exporter wrote linear_before_reset={written}"
    assert r.status == compare.DIVERGED
    f = r.first_diverging
    assert (f["output"], f["layer"], f["t"]) == ("y", 0, 0), compare.where(f)
    assert r.step_rows is not None and len(r.step_rows), "no step-local rows"


def test_torchscript_exporter_bidirectional_stack():
    """The TorchScript exporter keeps batch and time dynamic through a bidirectional stack."""
    adapter = runnable("torch-onnx-torchscript")
    case = Case(name="ts-bi", cell="gru", bidirectional=True, num_layers=2, **SMALL)
    r = run_pair(prepare(case), adapter)
    assert r.status == compare.PASS, r.reason


def test_frozen_axes_names_axis_and_sizes():
    from harness.adapters._torch_onnx import frozen_axes

    frozen_axes("x", ["batch", "steps", 3], (2, 4, 3))
    with pytest.raises(AdapterFault, match=r"axis 1 at 6 \(the case has 4\).*#191855"):
        frozen_axes("x", ["batch", 6, 3], (2, 4, 3))
    with pytest.raises(AdapterFault, match=r"input 'h0': axis 1 at 3 \(the case has 2\)") as e:
        frozen_axes("h0", [1, 3, 4], (1, 2, 4))
    assert "#191855" not in str(e.value)


@pytest.mark.parametrize("name", ["torch-onnx-dynamo", "torch-onnx-torchscript"])
def test_not_applicable_with_reasons(name):
    adapter = get_adapter(name)
    varlen = Case(name="v", cell="lstm", seq_lengths=[4, 2], **SMALL)
    assert "no sequence-lengths input" in adapter.not_applicable_reason(varlen)
    peep = Case(name="p", cell="lstm", peepholes=True, **SMALL)
    assert "peephole" in adapter.not_applicable_reason(peep)
    f64 = Case(name="d", cell="gru", **(SMALL | {"dtype": "float64"}))
    assert "float32 only" in adapter.not_applicable_reason(f64)


def test_save_outputs_writes_the_exported_graph_that_ran(tmp_path):
    """``--save-outputs`` writes the exported .onnx beside the outputs; that file, run again in
    ONNX Runtime, gives the outputs the report saved."""
    import numpy as np
    import onnxruntime as ort

    from harness.cli import main

    runnable("torch-onnx-torchscript")
    case_file = tmp_path / "tiny.yaml"
    case_file.write_text("name: tiny\ncell: gru\ninput_size: 3\nhidden_size: 4\nbatch: 2\n"
                         "seq_len: 4\ndtype: float32\ninitial_state: random\n")
    out = tmp_path / "report"
    assert main(["run", str(case_file), "--adapters", "torch-onnx-torchscript", "--quiet",
                 "--save-outputs", "--plots", "none", "--out", str(out)]) == 0
    model = out / "outputs" / "tiny" / "torch-onnx-torchscript.onnx"
    saved = np.load(out / "outputs" / "tiny" / "torch-onnx-torchscript.npz")
    inputs = prepare(Case(name="tiny", cell="gru", **(SMALL | {"seed": 0}))).inputs
    sess = ort.InferenceSession(model.read_bytes(), providers=["CPUExecutionProvider"])
    y, h_n = sess.run(None, {"x": inputs.x.astype(np.float32), "h0": inputs.h0.astype(np.float32)})
    np.testing.assert_array_equal(y, saved["y"].astype(np.float32))
    np.testing.assert_array_equal(h_n, saved["h_n"].astype(np.float32))


@pytest.mark.roads  # a dynamo export: the nightly's (torch-onnx-dynamo runs when named)
def test_dynamo_export_at_another_length_runs_at_the_case_length():
    """``export_seq_len``: exported at 4 steps, the time axis declared dynamic, run at 6 (the
    torchscript exporter does the same on cases/export-length.yaml)."""
    adapter = runnable("torch-onnx-dynamo")
    r = run_pair(prepare(Case(name="len", cell="lstm", **(SMALL | {"seq_len": 6,
                                                                    "export_seq_len": 4}))),
                 adapter)
    assert r.status == compare.PASS, r.reason
    assert "exported at 4 steps (time axis declared dynamic), run at 6" in r.reason
