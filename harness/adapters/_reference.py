"""What the reference adapters share: their capabilities (every feature of the equations) and
the forward plus, in a gradient case, the backward."""

from __future__ import annotations

from harness import reference
from harness.adapters.base import Capabilities
from harness.data import Inputs, Outputs
from harness.params import Canonical
from harness.spec import Case

EVERYTHING = Capabilities(
    peepholes=True, projection=True, cell_clip=True, proj_clip=True, gate_clip=True,
    input_forget=True, directions=frozenset({"forward", "reverse", "bidirectional"}),
    recurrent_activations=frozenset({"sigmoid", "hard_sigmoid_tf_keras", "hard_sigmoid_keras3"}),
    gradients=True,
)


def forward_backward(case: Case, canonical: Canonical, inputs: Inputs, dtype: str) -> Outputs:
    """The reference's outputs (arrays of the inputs' namespace), with the gradients in a
    gradient case; ``dtype`` other than float64 computes in that dtype's arithmetic."""
    out = reference.run(case, canonical, inputs, dtype=dtype)
    if case.gradients:
        out.grads = reference.gradients(case, canonical, inputs, dtype=dtype)
    return out
