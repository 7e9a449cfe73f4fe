"""Step-local divergence: every step of every layer run from the reference's own state.

Free-running comparison feeds an adapter its own outputs back through the recurrence, so a
rounding difference of one step is carried, and in a long or chaotic recurrence amplified, to
every later step. Step mode takes the recurrence out: for each layer it builds ONE derived
single-layer case whose batch holds every valid (b, t) of the original as a sequence of length
one, whose input is the reference's input to that layer at (b, t) and whose initial states are
the reference's states before step t, per direction (forward: after t − 1, h0/c0 at t = 0;
reverse: after t + 1 within the sequence's length, h0/c0 at its last valid step). The adapter's
y of that case, scattered back to [B, T, D·O], is then the one-step prediction from the exact
state, compared with the reference's y of the layer (:func:`harness.compare.step_divergence`).

A large one-step error is a mistake in the cell; small one-step errors under a large
free-running error say the cell is right and the error builds along the sequence: how state is
carried (chunks, padded steps, initial state, lengths, direction reversal) or rounding amplified
by the recurrence. The rows only explain: the free-running rows alone decide the verdict
(:func:`harness.compare.pair_verdict`), since injecting the reference's state hides every
state-carrying bug. See
docs/equations.md, "Step-local divergence".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness import reference
from harness.data import Inputs, Outputs
from harness.dtypes import round_to
from harness.params import Canonical, block_shapes, key
from harness.prepare import Prepared
from harness.reference.tape import Tape
from harness.spec import Case, GeneratedTensors


@dataclass
class StepCase:
    """The derived single-layer case of one layer, what it runs on, and where its rows go."""

    layer: int
    case: Case
    canonical: Canonical
    inputs: Inputs
    rows: np.ndarray  # [N] the b of each derived sequence
    steps: np.ndarray  # [N] the t of each derived sequence
    floor: Outputs  # the noise-floor reference (case dtype rounding) on the derived case

    def scatter(self, y: np.ndarray, B: int, T: int) -> np.ndarray:
        """The derived case's y [N, 1, D·O] back at its (b, t): [B, T, D·O], zero at padded
        steps (as the reference's y is)."""
        out = np.zeros((B, T, y.shape[-1]))
        out[self.rows, self.steps] = y[:, 0]
        return out


def derived_case(case: Case, layer: int, n: int) -> Case:
    """``case`` reduced to one step of layer ``layer`` for ``n`` sequences: same cell, features,
    directions and tolerances; the weights and inputs are handed over, not generated."""
    fields = case.model_dump()
    fields.update(name=f"{case.name}.step-L{layer}", num_layers=1, batch=n, seq_len=1,
                  seq_lengths=None, input_size=case.layer_input_size(layer),
                  initial_state="random", gradients=False, weights=GeneratedTensors(),
                  inputs=GeneratedTensors(), source=case.source)
    return Case.model_validate(fields)


def _layer_weights(case: Case, canonical: Canonical, layer: int) -> Canonical:
    """Layer ``layer``'s blocks, renamed to layer 0."""
    return Canonical({key(0, d, name): canonical[key(layer, d, name)]
                      for d in case.directions for name in block_shapes(case, layer)})


def step_cases(prep: Prepared) -> list[StepCase]:
    """One :class:`StepCase` per layer of a prepared case. Reruns the float64 reference with a
    tape (:func:`harness.reference.forward`), which records the state each step starts from;
    made once per case (kept in ``prep.steps``) and shared by its adapters."""
    if prep.steps is None:
        prep.steps = _step_cases(prep)
    return prep.steps


def _step_cases(prep: Prepared) -> list[StepCase]:
    case, inputs = prep.case, prep.inputs
    tapes: list[Tape] = []
    ref = reference.forward(case, prep.canonical, inputs, tapes=tapes)
    valid, order = reference.reading_order(inputs)
    rows, steps = np.nonzero(np.asarray(valid))  # every valid (b, t), b-major
    out = []
    for layer in range(case.num_layers):
        layer_in = inputs.x if layer == 0 else ref.y_layers[layer - 1]
        h0, c0 = [], []
        for k, d in enumerate(case.directions):
            tape = tapes[layer * case.num_directions + k]
            # the state before each step, in the order the direction read it, back in input
            # time order: a reverse direction's state before t is its state after t + 1
            h0.append(order(tape.over_time("h_prev"), d)[rows, steps])
            if case.cell_kind.has_cell_state:
                c0.append(order(tape.over_time("c_prev"), d)[rows, steps])
        derived = derived_case(case, layer, len(rows))
        canonical = _layer_weights(case, prep.canonical, layer)
        # in the case dtype, as every input of a case is (an adapter would round them anyway):
        # the noise floor then sees what the adapter sees
        d_inputs = Inputs(x=round_to(layer_in[rows, steps][:, None, :], case.dtype),
                          h0=round_to(np.stack(h0), case.dtype),
                          c0=round_to(np.stack(c0), case.dtype) if c0 else None,
                          seq_lengths=None)
        floor = reference.run(derived, canonical, d_inputs, dtype=case.dtype)
        out.append(StepCase(layer, derived, canonical, d_inputs, rows, steps, floor))
    return out
