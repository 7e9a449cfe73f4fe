"""``executorch`` and ``executorch-portable``: nn.LSTM/nn.GRU -> torch.export -> an ExecuTorch
program run by ExecuTorch's runtime. What ran decides the row, never the outputs alone.

- XNNPACK's part: each pair says how many nodes and delegate calls XNNPACK took and which ops
  stayed on the portable kernels; a lowering where XNNPACK took nothing (a float64 program: its
  kernels are float32/float16) is an error row, not a pass on the portable kernels.
- pytorch/executorch#8468 and #12344 (an LSTM cannot be exported with a dynamic sequence
  length): reproduced with executorch 1.5.1 / torch 2.13 on cases/export-length.yaml, declared
  in harness/known_bugs.py. Here: the pair is that known bug while the entry applies, an error
  row naming the fixed time axis without the entry, and "looks fixed" once such a case passes
  (a fix planted by exporting at the case's own length).
- ``--save-outputs`` writes the .pte the runtime ran: loaded again, it gives the same outputs.
- The layout (``torch``, nn.LSTM/nn.GRU's state_dict) is the probe's measurement through the
  lowered program too.

A lowering costs seconds to a minute on 2 cores: all but the first test are the nightly's
(marked roads).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from support.case_factory import case_maker
from support.runnable import runnable

from harness import compare, known_bugs
from harness.adapters import select
from harness.adapters.executorch import CAPABILITIES, ExecuTorch, ExecuTorchPortable
from harness.cases import load_cases
from harness.cli import main
from harness.npz import load_npz
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.probe import probe, render

make = case_maker(seed=5, dtype="float32", input_size=2, hidden_size=3, batch=2, seq_len=4,
                  initial_state="random")


def test_named_only_and_the_fixed_length_bug_shows_where_lengths_differ():
    """Data only, no framework: both variants run when named, and their known bug applies to a
    case that runs at another length than it was exported at, and to no other."""
    cpu = [a.name for a in select(None, "cpu")]
    for name in ("executorch", "executorch-portable"):
        assert name not in cpu and name in [a.name for a in select(["all", name], "cpu")]
        at = {k: known_bugs.known_bug(make(name="k", seq_len=6, **kw), name, {})
              for k, kw in (("other", dict(export_seq_len=4)), ("same", dict(export_seq_len=6)),
                            ("absent", {}))}
        if known_bugs.for_adapter(name)[0].installed_applies():
            assert at["other"].upstream == "pytorch/executorch#8468"
        assert at["same"] is None and at["absent"] is None


@pytest.mark.roads
@pytest.mark.torch
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_exported_at_another_length_is_the_known_bug_or_an_error_naming_it(cell, monkeypatch):
    adapter = runnable(ExecuTorch())
    prep = prepare(make(name="len", cell=cell, seq_len=6, export_seq_len=4))
    r = run_pair(prep, adapter)
    assert r.status == compare.KNOWN_BUG, r.reason
    assert "pytorch/executorch#8468" in r.reason
    assert "fixed the time axis at the export length 4" in r.reason
    monkeypatch.setattr(known_bugs, "KNOWN_BUGS", ())  # no entry: the plain error row
    r = run_pair(prep, adapter)
    assert r.status == compare.ERROR and "TimeAxisFixed" in r.reason, r.reason
    assert "seq_len 6" in r.reason


class ExportsAtTheRunLength(ExecuTorchPortable):
    """A planted fix of the fixed time axis: the program exported at the length it runs at."""

    def export_program(self, case, native):
        return super().export_program(case.model_copy(update={"export_seq_len": None}), native)


@pytest.mark.roads
@pytest.mark.torch
def test_a_fixed_export_looks_fixed():
    """Where the export-length case passes, the registry's entry is stale: LOOKS_FIXED."""
    r = run_pair(prepare(make(name="fixed", seq_len=6, export_seq_len=4)),
                 runnable(ExportsAtTheRunLength()))
    assert r.status == compare.LOOKS_FIXED, r.reason
    assert "pytorch/executorch#8468" in r.reason and "every op on the portable kernels" in r.reason


class Float64(ExecuTorch):
    """The XNNPACK adapter made to lower a float64 program, which XNNPACK does not take."""

    capabilities = replace(CAPABILITIES, dtypes=frozenset({"float32", "float64"}))


@pytest.mark.roads
@pytest.mark.torch
def test_xnnpack_delegating_nothing_is_an_error_not_a_portable_pass():
    r = run_pair(prepare(make(name="f64", dtype="float64")), runnable(Float64()))
    assert r.status == compare.ERROR, r.reason
    assert "XNNPACK delegated nothing" in r.reason and "portable kernels" in r.reason


@pytest.mark.roads
@pytest.mark.torch
def test_xnnpack_runs_and_the_saved_program_is_the_one_that_ran(tmp_path):
    runnable("executorch")
    (tmp_path / "c.yaml").write_text(
        "name: et\ncell: lstm\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_len: 4\n"
        "initial_state: random\nseed: 5\n")
    out = tmp_path / "r"
    assert main(["run", str(tmp_path / "c.yaml"), "--adapters", "reference,executorch",
                 "--out", str(out), "--quiet", "--save-outputs", "--plots", "none"]) == 0
    pair = next(p for p in json.loads((out / "run.json").read_text())["pairs"]
                if p["adapter"] == "executorch")
    assert pair["status"] == compare.PASS, pair["reason"]
    assert "loop unrolled over the 4 steps" in pair["reason"]
    assert "XNNPACK took" in pair["reason"] and "delegate call(s)" in pair["reason"]
    for op in ("linear", "sigmoid", "tanh"):
        assert f"{op} x" in pair["reason"].split("portable kernels")[0], pair["reason"]
    # the saved program, loaded again, gives the outputs the run compared
    import torch
    from executorch.runtime import Runtime

    program = (out / "outputs" / "et" / "executorch.pte").read_bytes()
    inputs = prepare(load_cases(tmp_path / "c.yaml")[0]).inputs
    saved = load_npz(out / "outputs" / "et" / "executorch.npz")
    feed = [torch.from_numpy(np.asarray(a, dtype=np.float32))
            for a in (inputs.x, inputs.h0, inputs.c0)]
    got = Runtime.get().load_program(program).load_method("forward").execute(feed)
    np.testing.assert_allclose(got[0].numpy(), saved["y"], rtol=0, atol=0)


@pytest.mark.roads
@pytest.mark.torch
def test_the_probe_measures_the_declared_torch_layout():
    """The probe (one lowering a native entry) of the portable variant on a GRU of hidden size
    1: 16 lowerings. By hand (`rnn-harness probe --adapter executorch --case ...`), an LSTM and
    a GRU of hidden size 1 pass for both variants."""
    result = probe(runnable(ExecuTorchPortable()),
                   make(name="probe", cell="gru", input_size=2, hidden_size=1))
    assert result.ok, render(result)
    assert all(e.measured for e in result.entries if e.declared)
