"""``litert-torch`` (nn.LSTM/nn.GRU -> ``litert_torch.convert`` -> LiteRT interpreter) and the
upstream reports about it, with litert-torch 0.10.0, torch 2.13 and ai-edge-litert 2.3.

- litert-torch#53 (the LSTM is decomposed and unrolled, not fused): the form, not a numeric bug.
  Each pair's reason names it (the unrolled form: no fused kernel, no ``WHILE``), and it
  conforms.
- litert-torch#808 (a plain ``nn.LSTM`` fails to convert): does not reproduce; the report's own
  call (an unbatched input, no state) converts and matches eager PyTorch, and a case whose
  initial state is omitted (the same call, batched) passes. Its mechanism is planted: a
  conversion that fails is an error row naming the failure, never a pass.
- litert-torch#1062 (no dynamic sequence length): reproduces; a case converted at one length and
  run at another is that known upstream bug (harness/known_bugs.py), with what the fixed-shape
  model returned.

Each conversion costs 5-25 s on 2 shared cores: these tests are the nightly's (``roads``) but
the planted conversion failure, which converts nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.case_factory import case_maker
from support.runnable import runnable

from harness import compare, known_bugs
from harness.adapters.litert_torch import LiteRTTorch
from harness.pairs import run_pair
from harness.prepare import prepare

torch = pytest.importorskip("torch")
pytest.importorskip("ai_edge_litert")
pytestmark = pytest.mark.litert

make = case_maker(seed=5, dtype="float32", input_size=2, hidden_size=3, batch=2, seq_len=4,
                  initial_state="random", weights={"init": "normal", "scale": 2.0})


class ConversionFails(LiteRTTorch):
    """#808's mechanism: ``litert_torch.convert`` raises on the module."""

    def convert(self, case, module, args, dynamic_length):
        raise RuntimeError("planted: failed to convert a LSTM module")


def test_a_conversion_that_fails_is_an_error_row_not_a_pass():
    runnable("torch-cpu")
    r = run_pair(prepare(make(name="refused")), ConversionFails())
    assert r.status == compare.ERROR, r.reason
    assert r.reason == "RuntimeError: planted: failed to convert a LSTM module"


@pytest.mark.roads  # a conversion
def test_a_bidirectional_lstm_conforms_and_says_its_unrolled_form():
    """#53: unrolled, not fused; the tflite --save-outputs writes is the model that ran."""
    adapter = runnable("litert-torch")
    r = run_pair(prepare(make(name="bi", direction="bidirectional")), adapter)
    assert r.status == compare.PASS, r.reason
    assert "LiteRT ran the unrolled form litert-torch 0.10.0 emitted" in r.reason
    assert "FULLY_CONNECTED" in r.reason and "REVERSE_V2" in r.reason
    model = r.outputs.models["tflite"]
    assert model[4:8] == b"TFL3"
    from ai_edge_litert.interpreter import Interpreter

    ops = {op["op_name"] for op in Interpreter(model_content=model)._get_ops_details()}
    assert not ops & {"WHILE", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"}


@pytest.mark.roads  # two conversions
def test_808_does_not_reproduce():
    """The report's call converts and matches eager PyTorch; the harness's form of it (the
    state omitted) passes."""
    import litert_torch

    from harness.adapters.litert_torch import quiet

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(20, 100, num_layers=1, bias=True, batch_first=True).eval()
    text = torch.randint(0, 10, (1, 20)).to(torch.float32)  # unbatched: 1 step of 20 features
    with quiet():
        got = litert_torch.convert(lstm, (text,))(text)
    with torch.no_grad():
        y, (h, c) = lstm(text)
    for a, b in zip(got, (y, h, c), strict=True):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=1e-5, rtol=1e-5)
    r = run_pair(prepare(make(name="omitted", initial_state="none")), runnable("litert-torch"))
    assert r.status == compare.PASS, r.reason
    assert "initial state omitted" in r.reason


@pytest.mark.roads  # a refused conversion, then one at the fixed length
def test_another_length_than_converted_is_the_known_bug_1062():
    case = make(name="longer", cell="gru", seq_len=6, export_seq_len=4)
    entry = known_bugs.known_bug(case, "litert-torch", None)
    assert entry is not None and entry.upstream == "google-ai-edge/litert-torch#1062"
    assert known_bugs.known_bug(make(name="same", export_seq_len=4), "litert-torch", None) is None
    r = run_pair(prepare(case), runnable("litert-torch"))
    assert r.status == compare.KNOWN_BUG, r.reason
    assert "known upstream bug google-ai-edge/litert-torch#1062" in r.reason
    assert "specialized it to be a constant (4)" in r.reason
    assert "run at seq_len 6 returned y of 4 step(s)" in r.reason
