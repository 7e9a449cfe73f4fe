"""Blind spots of a case: layout mistakes its weights and inputs could not reveal.

A conformance case only proves a layout right if every plausible mistake
(:mod:`harness.mistakes`) would push the divergence past ``k`` times the tolerance. This module
runs each single mistake through the float64 reference on the case's own weights and inputs
and lists the ones that stay below that, with why:

- the mistake is a no-op at the case's sizes (a transpose of a [1, 1] block, a reshape of an
  [H, 1] slice, swapped initial states that are zero): "the same either way";
- it changes the weights but not the outputs enough (constant weights, zero biases, two
  gates with equal blocks): "changes the outputs by only 3.2x tolerance".

Each mistake is one reference run, so a case with ``hidden_size x num_layers`` above
:data:`MAX_SIZE` is skipped (and says so), and the probes run on a truncated copy of the case
(:func:`truncated`: at most :data:`MAX_STEPS` timesteps and :data:`MAX_BATCH` sequences of its
own weights and inputs): a layout mistake is a permutation or reshape of the weights, which
shows, or not, in the first steps of the first sequences just as in all of them, so the copy has
the same blind spots while the check stays bounded whatever seq_len and batch are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness import reference
from harness.compare import tolerance_for
from harness.data import Inputs
from harness.layouts import get_layout
from harness.params import Canonical
from harness.spec import Case

K = 10.0
MAX_SIZE = 400
MAX_STEPS = 16
MAX_BATCH = 2


@dataclass(frozen=True)
class BlindSpot:
    mistake: str  # mistake id, e.g. "reading:R:C"; "" for a no-op at these sizes
    text: str
    why: str


def too_big(case: Case) -> str | None:
    size = case.hidden_size * case.num_layers
    if size > MAX_SIZE:
        return f"skipped: hidden_size x num_layers = {size} > {MAX_SIZE}"
    return None


def truncated(case: Case, inputs: Inputs) -> tuple[Case, Inputs]:
    """The case and its inputs cut to the first :data:`MAX_STEPS` timesteps and
    :data:`MAX_BATCH` sequences (forward only: the blind-spot check compares outputs)."""
    T, B = min(case.seq_len, MAX_STEPS), min(case.batch, MAX_BATCH)
    lengths = None
    if inputs.seq_lengths is not None:
        lengths = np.minimum(np.asarray(inputs.seq_lengths)[:B], T)
    small = case.model_copy(update={
        "seq_len": T, "batch": B, "gradients": False,
        "seq_lengths": [int(n) for n in lengths] if lengths is not None else None})
    return small, Inputs(x=inputs.x[:B, :T], h0=inputs.h0[:, :B],
                         c0=inputs.c0[:, :B] if inputs.c0 is not None else None,
                         seq_lengths=lengths)


def blind_spots(case: Case, canonical: Canonical | None = None, inputs: Inputs | None = None,
                k: float = K) -> list[BlindSpot]:
    """The single mistakes ``case`` cannot tell from the truth by at least ``k`` x tolerance
    (probed on :func:`truncated` copies of the case and its inputs)."""
    from harness.doctor import Doctor
    from harness.prepare import load_inputs, load_weights

    canonical = canonical if canonical is not None else load_weights(case)
    inputs = inputs if inputs is not None else load_inputs(case)
    case, inputs = truncated(case, inputs)
    truth = reference.run(case, canonical, inputs).named()
    doctor = Doctor(case, get_layout("canonical"), canonical.tensors, inputs, truth,
                    tolerance_for(case, ""))
    spots = [BlindSpot("", text, f"the same at these sizes: {why}")
             for text, why in doctor.catalogue.noops]
    for m in doctor.catalogue.mistakes:
        s = doctor.evaluate((m,))
        if s.worst < k:
            spots.append(BlindSpot(m.id, m.brief,
                                   f"changes the outputs by only {s.worst:.2g}x tolerance"))
    return spots


def blind_note(case: Case, k: float = K) -> str:
    """One line for summary.md: what the case is blind to (empty when nothing)."""
    skipped = too_big(case)
    if skipped:
        return f"Blind-spot check {skipped}."
    try:
        spots = blind_spots(case, k=k)
    except Exception as exc:  # a case that cannot be prepared is reported elsewhere
        return f"Blind-spot check not run ({type(exc).__name__}: {str(exc)[:120]})."
    if not spots:
        return (f"Blind to: nothing (every plausible layout mistake moves the outputs by more "
                f"than {k:g}x tolerance).")
    return f"Blind to (mistakes that move the outputs by less than {k:g}x tolerance): " + \
        "; ".join(_group(spots)) + "."


def _group(spots: list[BlindSpot]) -> list[str]:
    """Short phrases: gate orders counted per kind, the rest one phrase each."""
    out: list[str] = []
    orders: dict[str, int] = {}
    for s in spots:
        if s.mistake.startswith("order:"):
            kind = s.mistake.split(":")[1]
            orders[kind] = orders.get(kind, 0) + 1
        else:
            out.append(f"{s.text} ({s.why})")
    labels = {"all": "gate orders of every tensor", "W": "W gate orders", "R": "R gate orders",
              "b": "bias gate orders", "p": "peephole orders"}
    for kind, n in orders.items():
        out.append(f"{n} {labels[kind]}")
    return out
