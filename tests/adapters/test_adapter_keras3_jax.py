"""``keras3-jax`` (Keras 3 on JAX, in a worker process of its own) and the two recent changes
of its LSTM/GRU code paths, with the installed keras 3.15.1 / jax 0.10.2 on the CPU:

- keras#22401 (a ``lax.scan`` GRU for reset-after GRUs without a mask) runs on the CPU and
  passes: the spy checks that a bundled-case-like GRU takes it. Its guard (a masked batch goes
  to the generic loop) is planted away: the mask dropped, the final state must be DIVERGED.
- keras#22399 (the cuDNN LSTM through ``jax.experimental.rnn``) needs a GPU: never taken here.
  Its ``go_backwards`` handling (the sequence flipped back to input order, where the generic
  loop returns reading order) is planted after the generic loop: DIVERGED, reverse direction.
- float64: left out of the capabilities because Keras's tanh computes it in float32 on JAX;
  run anyway, it must still diverge (when Keras fixes it, this fails: add float64 back).

One planted adapter (tests/support/keras3_jax_planted.py) serves every test, so one worker is
started (~3 s: spawn, jax and keras imports); cases are small.
"""

from __future__ import annotations

import dataclasses

import pytest
from support.keras3_jax_planted import Planted
from support.runnable import runnable

from harness import compare
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.spec import Case

pytest.importorskip("jax")
pytest.importorskip("keras")
pytestmark = pytest.mark.jax

# trained-like magnitudes (cases/trained-like/): weights of several units
SMALL = dict(input_size=3, hidden_size=4, batch=3, seq_len=5, initial_state="random",
             dtype="float32", seed=11, weights={"scale": 2.0})


def test_fast_gru_path_taken_and_mask_ignored_is_diverged():
    spy = runnable(Planted())
    plain = run_pair(prepare(Case(name="gru-fast", cell="gru", **SMALL)), spy)
    assert plain.status == compare.PASS, plain.reason
    assert int(plain.outputs.extras["fast_gru"]) == 1, "keras#22401's lax.scan GRU not taken"
    masked = Case(name="gru-masked", cell="gru", seq_lengths=[5, 3, 2], **SMALL)
    r = run_pair(prepare(masked), spy)
    assert r.status == compare.PASS and int(r.outputs.extras["fast_gru"]) == 0  # generic loop

    r = run_pair(prepare(masked.model_copy(update={"name": "mask-ignored"})), spy)
    assert r.status == compare.DIVERGED, r.reason
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"]) == ("h_n", 0, 0), compare.where(f)


def test_reverse_in_input_order_is_diverged_with_where():
    planted = runnable(Planted())
    r = run_pair(prepare(Case(name="reverse-order", cell="lstm", direction="reverse", **SMALL)),
                 planted)
    assert r.status == compare.DIVERGED, r.reason
    f = r.first_diverging
    assert (f["output"], f["layer"], f["direction"]) == ("y", 0, 1), compare.where(f)
    assert f["t"] == 0


def test_float64_still_computed_in_float32():
    spy = runnable(Planted())
    forced = dataclasses.replace(spy.capabilities,
                                 dtypes=spy.capabilities.dtypes | {"float64"})
    spy.capabilities = forced  # this object only: applicability is decided here
    case = Case(name="lstm-f64", cell="lstm", **(SMALL | {"dtype": "float64"}))
    r = run_pair(prepare(case), spy)
    assert r.status == compare.DIVERGED, "float64 now conforms on JAX: add it to dtypes"
    f = r.first_diverging
    assert (f["output"], f["layer"], f["t"]) == ("y", 0, 0), compare.where(f)
    assert 1e-9 < f["max_abs"] < 1e-6  # float32 rounding, not a wrong formula
