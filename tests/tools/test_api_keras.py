"""The Python API with Keras objects: a Keras 3 layer as the weights (its sizes, directions and
GRU variant told by the layer), and Keras's own output lists as the expected outputs, in the
harness's order. Checked against the harness's own float64 reference of the same case."""

from __future__ import annotations

import numpy as np
import pytest

import harness
from harness.adapters import ADAPTERS
from harness.prepare import prepare

pytestmark = pytest.mark.keras


@pytest.fixture(scope="module")
def keras():
    reason = ADAPTERS["keras3"].unavailable_reason()
    if reason:
        pytest.skip(reason)
    _, keras = ADAPTERS["keras3"].import_keras()
    return keras


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32)


def _assert_reference(expected: dict[str, np.ndarray], case: harness.Case) -> None:
    reference = prepare(case).reference.named()
    assert expected.keys() == reference.keys()
    for name, want in reference.items():  # float32 Keras against the float64 reference
        np.testing.assert_allclose(expected[name], want, rtol=0, atol=1e-5, err_msg=name)


def test_a_bidirectional_lstm_layer_and_its_output_list(keras):
    keras.utils.set_random_seed(0)
    layer = keras.layers.Bidirectional(
        keras.layers.LSTM(3, return_sequences=True, return_state=True))
    layer(np.zeros((1, 1, 2), np.float32))  # built: its weights exist
    case = harness.make_case({"batch": 2, "seq_len": 5, "initial_state": "random"},
                             weights=layer)
    assert (case.cell, case.input_size, case.hidden_size, case.dir_mode) == (
        "lstm", 2, 3, "bidirectional")
    inputs = harness.case_inputs(case)
    # Keras's initial states: forward h, c, then backward h, c
    out = layer(_f32(inputs.x), initial_state=[_f32(inputs.h0[0]), _f32(inputs.c0[0]),
                                               _f32(inputs.h0[1]), _f32(inputs.c0[1])])
    assert len(out) == 5  # [y, h_f, c_f, h_b, c_b]
    # the reference runs the weights taken from the layer: equal outputs say they are its own
    _assert_reference(harness.expected_outputs(out, case, framework="keras"), case)


def test_a_go_backwards_gru_layer_and_its_output_list(keras):
    keras.utils.set_random_seed(1)
    layer = keras.layers.GRU(3, go_backwards=True, reset_after=False, return_sequences=True,
                             return_state=True)
    layer(np.zeros((1, 1, 2), np.float32))
    case = harness.make_case({"batch": 2, "seq_len": 4}, weights=layer)
    assert (case.cell, case.dir_mode, case.reset_after) == ("gru", "reverse", False)
    out = layer(_f32(harness.case_inputs(case).x))  # y in reading order: last step first
    _assert_reference(harness.expected_outputs(out, case, framework="keras"), case)
    with pytest.raises(harness.WeightsError, match="reset_after: the file holds false, the case "
                                                   "says true"):
        harness.check({"batch": 2, "seq_len": 4, "reset_after": True}, weights=layer,
                      adapters="reference")


def test_a_tf_keras_layer_with_its_hard_sigmoid(keras):
    reason = ADAPTERS["keras"].unavailable_reason()
    if reason:
        pytest.skip(reason)
    tf, tf_keras = ADAPTERS["keras"].import_keras()
    tf.random.set_seed(0)
    layer = tf_keras.layers.LSTM(3, recurrent_activation="hard_sigmoid", return_sequences=True,
                                 return_state=True)
    layer(np.zeros((1, 1, 2), np.float32))
    case = harness.make_case({"batch": 2, "seq_len": 4}, weights=layer)
    # tf_keras's hard_sigmoid, not Keras 3's: the layer's library tells which
    assert (case.cell, case.dir_mode, case.recurrent_activation) == (
        "lstm", "forward", "hard_sigmoid_tf_keras")
    out = layer(_f32(harness.case_inputs(case).x))
    _assert_reference(harness.expected_outputs(out, case, framework="keras"), case)
