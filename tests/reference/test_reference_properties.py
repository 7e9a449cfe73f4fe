"""Structural properties of the float64 reference that need no other framework.

The cross-framework checks (cs231n, torch, TF) pin the cell equations; these pin the plumbing
around them: what a padded step may influence, how a reverse direction reads its sequence,
and how layers are stacked. Each property compares the reference with itself, run another
way (one sequence at a time, on a flipped sequence, one layer at a time).
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import params, reference
from harness.data import Inputs, generate
from harness.params import Canonical
from harness.spec import Case

LSTM = dict(cell="lstm", input_size=3, hidden_size=5, proj_size=2, peepholes=True,
            cell_clip=0.8, forget_bias=0.5)
GRU = dict(cell="gru", input_size=3, hidden_size=4)


def _case(cell: dict, **kw) -> Case:
    base = dict(name="prop", dtype="float64", initial_state="random", batch=4, seq_len=6)
    return Case(**{**base, **cell, **kw})


@pytest.mark.parametrize("cell", [LSTM, GRU], ids=["lstm", "gru"])
def test_padding_content_is_ignored_and_matches_each_sequence_alone(cell: dict) -> None:
    case = _case(cell, num_layers=2, bidirectional=True, seq_lengths=[6, 2, 5, 1])
    canonical, inputs = params.generate(case), generate(case)
    out = reference.run(case, canonical, inputs)

    # Garbage in the padding changes nothing.
    x = inputs.x.copy()
    lengths = inputs.lengths
    pad = np.arange(case.seq_len)[None, :] >= lengths[:, None]
    x[pad] = 1e3
    out2 = reference.run(case, canonical, Inputs(x, inputs.h0, inputs.c0, inputs.seq_lengths))
    for name, v in out.named().items():
        np.testing.assert_array_equal(out2.named()[name], v, err_msg=name)
    assert np.all(out.y[pad] == 0.0)

    # Each sequence run alone, unpadded, gives the same y prefix and final states.
    for b, n in enumerate(lengths):
        one = case.model_copy(update={"batch": 1, "seq_len": int(n), "seq_lengths": None})
        c0 = None if inputs.c0 is None else inputs.c0[:, b:b + 1]
        alone = reference.run(one, canonical,
                              Inputs(inputs.x[b:b + 1, :n], inputs.h0[:, b:b + 1], c0, None))
        np.testing.assert_allclose(alone.y[0], out.y[b, :n], rtol=0, atol=1e-15)
        np.testing.assert_allclose(alone.h_n[:, 0], out.h_n[:, b], rtol=0, atol=1e-15)
        if c0 is not None:
            np.testing.assert_allclose(alone.c_n[:, 0], out.c_n[:, b], rtol=0, atol=1e-15)


@pytest.mark.parametrize("cell", [LSTM, GRU], ids=["lstm", "gru"])
def test_reverse_direction_is_forward_on_the_flipped_sequence(cell: dict) -> None:
    rev = _case(cell, direction="reverse")
    fwd = rev.model_copy(update={"direction": "forward"})
    canonical, inputs = params.generate(rev), generate(rev)
    renamed = Canonical({k.replace("/backward/", "/forward/"): v
                         for k, v in canonical.tensors.items()})
    flipped = Inputs(inputs.x[:, ::-1], inputs.h0, inputs.c0, None)
    a = reference.run(rev, canonical, inputs)
    b = reference.run(fwd, renamed, flipped)
    np.testing.assert_array_equal(a.y, b.y[:, ::-1])
    np.testing.assert_array_equal(a.h_n, b.h_n)
    np.testing.assert_array_equal(a.h_n[0], a.y[:, 0])  # reverse ends at t = 0


@pytest.mark.parametrize("cell", [LSTM, GRU], ids=["lstm", "gru"])
def test_layers_stack_on_the_concatenated_outputs(cell: dict) -> None:
    case = _case(cell, num_layers=2, bidirectional=True)
    canonical, inputs = params.generate(case), generate(case)
    out = reference.run(case, canonical, inputs)
    np.testing.assert_array_equal(out.y_layers[-1], out.y)
    # Layer 1 alone, fed layer 0's y, with layer 1's weights renamed to layer 0.
    upper = case.model_copy(update={"num_layers": 1, "input_size": case.layer_input_size(1)})
    weights = Canonical({k.replace("layer1/", "layer0/"): v
                         for k, v in canonical.tensors.items() if k.startswith("layer1/")})
    c0 = None if inputs.c0 is None else inputs.c0[2:]
    alone = reference.run(upper, weights, Inputs(out.y_layers[0], inputs.h0[2:], c0, None))
    np.testing.assert_array_equal(alone.y, out.y)
    np.testing.assert_array_equal(alone.h_n, out.h_n[2:])
    # h_n ordering: forward is the state at t = T-1, reverse the state at t = 0.
    P = case.out_size
    np.testing.assert_array_equal(out.h_n[-2], out.y[:, -1, :P])
    np.testing.assert_array_equal(out.h_n[-1], out.y[:, 0, P:])
