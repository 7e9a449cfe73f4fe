"""The float64 reference: :func:`run` (the forward) and :func:`gradients` (backpropagation
through time), around the one-direction cells ``lstm.py`` and ``gru.py`` and the layer x
direction x lengths driver ``layers.py`` that both use.

The code is array-namespace generic: with CuPy arrays in ``canonical`` and ``inputs`` it runs on
the GPU (float64 only; see ``harness/reference/functions.py``).
"""

from __future__ import annotations

from harness.data import Gradients, Inputs, Outputs
from harness.params import Canonical
from harness.reference.functions import Precision
from harness.reference.layers import forward, reading_order, reversal_index
from harness.spec import Case

__all__ = ["forward", "gradients", "reading_order", "reversal_index", "run"]


def run(case: Case, canonical: Canonical, inputs: Inputs, dtype: str = "float64") -> Outputs:
    """Run the case. ``dtype`` other than float64 computes in that dtype's arithmetic (the noise
    floor: :class:`~harness.reference.functions.Precision`)."""
    return forward(case, canonical, inputs, Precision(dtype))


def gradients(
    case: Case, canonical: Canonical, inputs: Inputs, dtype: str = "float64"
) -> Gradients:
    """Backpropagation through time of the loss in ``harness.data`` (upstream gradients
    ``inputs.dy``, ``dh_n``, ``dc_n``): dx, dh0, dc0 and every canonical parameter's gradient.
    ``dtype`` other than float64 computes in that dtype's arithmetic (the gradients' noise
    floor)."""
    from harness.reference.backward import backward

    return backward(case, canonical, inputs, dtype)
