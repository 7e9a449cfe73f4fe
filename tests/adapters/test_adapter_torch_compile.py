"""``torch-compile``: what dynamo captured decides the row, never the outputs alone.

Inductor's C++ compile costs tens of seconds a case on 2 cores, so these tests keep dynamo (the
part that decides whether the RNN is compiled at all) and replace only Inductor's code
generation by the captured graph itself (``compile_graph``); the side-effect test
(tests/inputs/test_untrusted_side_effects.py) runs the real adapter, Inductor included.

- pytorch#158007 (open; torch 2.13): without ``allow_rnn`` dynamo leaves ``nn.LSTM`` to eager
  PyTorch. Reproduced: the adapter with ``allow_rnn`` off is an error row naming the eager run,
  not a pass (the outputs are eager PyTorch's, which would match).
- A ``PackedSequence`` (variable lengths) is not captured at all: checked here, so the
  capability is added when a release captures it.
- ``allow_rnn`` and Inductor's cache folder are the adapter's call's only: restored after.
- pytorch#175830 (CUDA, 2026-02: nn.LSTM compiled with shape padding 2.4e-4 off eager in
  relative L2): not taken on the CPU with torch 2.13 (Inductor pads matmuls of CUDA/XPU tensors
  only, and leaves comprehensive padding off on the CPU); compiled with every padding switch on,
  cases/forget-bias.yaml is bit-identical to eager. Its outcome is planted (the compiled outputs
  2.4e-4 off in relative L2) and must come out DIVERGED.
- pytorch#181690 (2026-04: heap corruption, glibc aborting the process, when a model with
  nn.LSTM/nn.GRU is compiled; a duplicate of #181618, closed): does not reproduce on torch
  2.13.0 CPU (the report's model compiled twice, and the bundled cases, run to the end). Its
  outcome is planted (the compiled code aborts the process): with ``--isolate`` the pair is an
  error row naming SIGABRT and the run goes on.
"""

from __future__ import annotations

import os

import pytest
from support.case_factory import case_maker

from harness import compare
from harness.adapters.torch_compile import TorchCompile
from harness.pairs import run_pair
from harness.prepare import prepare

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.roads]  # a compile per test: the nightly's

make = case_maker(seed=5, dtype="float32", input_size=2, hidden_size=3, batch=2, seq_len=4,
                  initial_state="random")


class DynamoOnly(TorchCompile):
    """The adapter with Inductor's code generation left out: the captured graph runs as is."""

    def compile_graph(self, gm, example_inputs):
        return gm.forward


class NoAllowRnn(DynamoOnly):
    allow_rnn = False


@pytest.mark.parametrize("kw", [dict(cell="lstm", direction="bidirectional", num_layers=2),
                                dict(cell="gru")])
def test_dynamo_captures_the_whole_rnn_and_says_so(kw):
    r = run_pair(prepare(make(name="captured", **kw)), DynamoOnly())
    assert r.status == compare.PASS, r.reason
    assert "1 graph(s), 0 graph break(s)" in r.reason
    assert "captured torch.lstm whole" in r.reason or "captured torch.gru whole" in r.reason


def test_without_allow_rnn_the_eager_rnn_is_an_error_not_a_pass():
    """pytorch#158007: the RNN runs eager; its outputs are right, the road did not run."""
    r = run_pair(prepare(make(name="eager")), NoAllowRnn())
    assert r.status == compare.ERROR, r.reason
    assert "EagerFallback" in r.reason and "ran in eager PyTorch" in r.reason


def test_a_packed_sequence_is_still_not_captured():
    """Why variable_lengths is off: dynamo compiles nothing of a packed LSTM (torch 2.13)."""
    m = torch.nn.LSTM(2, 3, batch_first=True).eval()

    def packed(x, lengths):
        p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True,
                                                    enforce_sorted=False)
        return m(p)[1]

    with torch._dynamo.config.patch(allow_rnn=True):
        explained = torch._dynamo.explain(packed)(torch.ones(2, 4, 2), torch.tensor([4, 2]))
    torch._dynamo.reset()
    assert explained.graph_count == 0, "dynamo now captures a PackedSequence: add the capability"
    assert TorchCompile().not_applicable_reason(make(name="v", seq_lengths=[4, 2])) is not None


def test_allow_rnn_and_the_cache_folder_are_restored():
    before = (torch._dynamo.config.allow_rnn, os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    run_pair(prepare(make(name="restored", cell="gru")), DynamoOnly())
    assert (torch._dynamo.config.allow_rnn, os.environ.get("TORCHINDUCTOR_CACHE_DIR")) == before


def test_left_out_of_the_default_selection():
    from harness.adapters import select

    assert "torch-compile" not in [a.name for a in select(None, "cpu")]
    assert "torch-compile" in [a.name for a in select(["all", "torch-compile"], "cpu")]


def test_175830_planted_outputs_off_by_padding_are_diverged():
    """A relative L2 of 2.4e-4 is beyond float32's default tolerance: DIVERGED, not a pass."""
    from support.compile_faults import CompiledOffByPadding

    r = run_pair(prepare(make(name="padded", cell="lstm")), CompiledOffByPadding())
    assert r.status == compare.DIVERGED, r.reason
    assert "captured torch.lstm whole" in r.reason  # the road ran; its numbers are off


def test_181690_planted_abort_in_the_compiled_code_is_an_error_row(tmp_path):
    """Isolated, the aborted worker costs its pair only: an error row naming SIGABRT."""
    from support.compile_faults import CompiledAborts

    from harness.adapters.reference import Reference
    from harness.run_options import RunOptions
    from harness.runner import run

    cases = [make(name="aborts", cell="gru")]
    result = run(cases, [Reference(), CompiledAborts()], RunOptions(isolate=True))
    pair = next(p for p in result.pairs if p.adapter == "torch-compile-aborts")
    assert pair.status == compare.ERROR, pair.reason
    assert pair.reason.startswith(
        "the worker process of torch-compile-aborts was killed by SIGABRT"), pair.reason
