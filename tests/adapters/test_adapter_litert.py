"""The Keras -> LiteRT adapters (``litert-tf-keras``, ``litert-keras3``) and the upstream reports
about converted LSTMs, with tensorflow 2.21, tf_keras 2.21, keras 3.15 and ai-edge-litert 2.3.

- tensorflow#73254 / google-ai-edge/LiteRT#41 / tensorflow#126061 (a Keras 3 LSTM converted to a
  ``WHILE`` loop, not the fused ``UNIDIRECTIONAL_SEQUENCE_LSTM``): the form, not a numeric bug.
  Both adapters report the form in each pair's reason; here it is a ``WHILE`` loop for either
  Keras, and its numbers conform.
- tensorflow#57015 (``unroll=True`` converting to different results than ``unroll=False``): does
  not reproduce (the unrolled tf_keras LSTM passes). Its mechanism is planted: an unrolled
  conversion whose state is dropped at one step must come out DIVERGED at that step.
- A layout mistake inside the converted model (the kernel's f and g blocks swapped before
  conversion) must come out DIVERGED at the first step.

Conversions cost 0.2-2 s each: few, small cases.
"""

from __future__ import annotations

import pytest
from support.runnable import runnable

from harness import compare
from harness.adapters import _litert, get_adapter
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert")
pytestmark = pytest.mark.litert

# trained-like magnitudes (normal, scale 2: weights of several units)
SMALL = dict(input_size=3, hidden_size=4, batch=2, seq_len=5, initial_state="random",
             dtype="float32", seed=5, weights={"init": "normal", "scale": 2.0})


@pytest.mark.parametrize("name", ["litert-tf-keras", "litert-keras3"])
def test_lstm_conforms_and_says_its_form(name):
    """#73254 / LiteRT#41 / #126061: the form is reported; the loop's numbers conform."""
    adapter = runnable(name)
    r = run_pair(prepare(Case(name="lstm", cell="lstm", **SMALL)), adapter)
    assert r.status == compare.PASS, r.reason
    assert "LiteRT ran the WHILE loop form" in r.reason
    # the model --save-outputs writes is the converted flatbuffer the interpreter ran
    model = r.outputs.models["tflite"]
    assert model[4:8] == b"TFL3"
    from ai_edge_litert.interpreter import Interpreter

    names = {d["name"] for d in Interpreter(model_content=model).get_input_details()}
    assert {"x", "h0_0", "c0_0"} <= names, names


def test_unrolled_conforms():
    """tensorflow#57015 does not reproduce: unroll=True converts to the steps unrolled, and
    conforms as unroll=False does."""
    adapter = runnable("litert-tf-keras")
    unrolled = type(adapter)()
    unrolled.unroll = True
    r = run_pair(prepare(Case(name="unrolled", cell="lstm", **SMALL)), unrolled)
    assert r.status == compare.PASS, r.reason
    assert "LiteRT ran the unrolled form" in r.reason


def test_planted_unrolled_state_dropped_diverges_with_where(monkeypatch):
    """#57015's mechanism planted: an unrolled conversion whose state is dropped (zeros) at step
    2 must be DIVERGED first at step 2 of layer 0, forward; its step-local rows say where."""
    adapter = runnable("litert-tf-keras")
    unrolled = type(adapter)()
    unrolled.unroll = True
    forward = _litert.forward

    def dropped_at_2(tf, case, layers, x, h0, c0, mask):
        if x.shape[1] <= 2:  # a step-local one-step run: nothing to drop
            return forward(tf, case, layers, x, h0, c0, mask)
        y1, _, _, _ = forward(tf, case, layers, x[:, :2], h0, c0, mask)
        zeros = [tf.zeros_like(s) for s in h0]
        y2, h_n, c_n, _ = forward(tf, case, layers, x[:, 2:], zeros,
                                  [tf.zeros_like(s) for s in c0], mask)
        y = tf.concat([y1, y2], axis=1)
        return y, h_n, c_n, [y]

    monkeypatch.setattr(_litert, "forward", dropped_at_2)
    r = run_pair(prepare(Case(name="dropped", cell="lstm", **SMALL)), unrolled, step_mode="on")
    assert r.status == compare.DIVERGED, r.reason
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"], f["t"]) == ("y", 0, 0, 2), compare.where(f)
    assert r.step_rows is not None and len(r.step_rows), "no step-local rows"


@pytest.mark.parametrize("name", ["litert-tf-keras", "litert-keras3"])
def test_planted_gate_order_diverges_with_where(monkeypatch, name):
    """Weights fed in a wrong gate order (the kernel's f and g blocks swapped before
    conversion, so the .tflite constants hold them swapped): DIVERGED at the first step."""
    adapter = runnable(name)
    load_native = _litert.load_native

    def swapped(case, layers, native, np_dtype):
        native = dict(native)
        H = case.hidden_size
        k = native["kernel"].copy()  # [I, 4H], Keras gate order i, f, c, o
        f, g = slice(H, 2 * H), slice(2 * H, 3 * H)
        k[:, f], k[:, g] = native["kernel"][:, g], native["kernel"][:, f]
        native["kernel"] = k
        return load_native(case, layers, native, np_dtype)

    monkeypatch.setattr(_litert, "load_native", swapped)
    r = run_pair(prepare(Case(name="gates", cell="lstm", **SMALL)), adapter)
    assert r.status == compare.DIVERGED, r.reason
    f = r.first_diverging
    assert (f["layer"], f["t"]) == (0, 0), compare.where(f)


@pytest.mark.parametrize("name", ["litert-tf-keras", "litert-keras3"])
def test_not_applicable_with_the_converters_words(name):
    adapter = get_adapter(name)
    for dtype in ("float64", "float16", "bfloat16"):
        case = Case(name="d", cell="gru", **(SMALL | {"dtype": dtype}))
        reason = adapter.not_applicable_reason(case)
        assert "float32 only" in reason and "neither a custom op nor a flex op" in reason


def test_form_of():
    assert _litert.form_of(["TRANSPOSE", "WHILE"]) == "WHILE loop"
    assert _litert.form_of(["UNIDIRECTIONAL_SEQUENCE_LSTM"]) == "fused UNIDIRECTIONAL_SEQUENCE_LSTM"
    assert _litert.form_of(["FULLY_CONNECTED", "LOGISTIC", "TANH"]) == "unrolled"
