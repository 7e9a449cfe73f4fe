"""The float64 reference backward pass: layers, directions and variable lengths around the
one-direction cells of ``lstm_backward.py`` and ``gru_backward.py``.

The loss is the one of ``harness.data``: L = Σ dy ⊙ y + Σ dh_n ⊙ h_n + Σ dc_n ⊙ c_n. The
forward pass (``harness.reference.forward``, the one of ``reference.run``) keeps each
direction's tape; the backward then runs from the top layer down:

- the top layer's ``dy`` is split into its directions' features (forward first); a reverse
  direction reads its ``dy`` through the same per-sequence reversal as its input
  (``reading_order``: the reversal is its own inverse), and its ``dx`` goes back the same way;
- each direction starts from its own ``dh_n`` / ``dc_n`` (the states at each sequence's last
  valid step, held through the padded steps, so that is where their gradient enters);
- layer l's ``dx`` (both directions summed) is the ``dy`` of layer l − 1; layer 0's is ``dx``.

Padded steps: ``y`` is a constant 0 there and the state is held, so their ``dy`` is ignored,
their ``dx`` is 0 and they add nothing to any parameter gradient.
"""

from __future__ import annotations

from types import ModuleType

from harness.data import Gradients, Inputs
from harness.params import Canonical, block_shapes, expected_shapes, key
from harness.reference import gru_backward, lstm_backward
from harness.reference.functions import Array, Precision, array_namespace, zeros
from harness.reference.layers import forward, reading_order
from harness.reference.tape import Tape
from harness.spec import Case

# cell -> its backward module, looked up at call time so tests may plant a mistake in one
CELLS: dict[str, ModuleType] = {"lstm": lstm_backward, "gru": gru_backward}


def backward(case: Case, canonical: Canonical, inputs: Inputs, dtype: str = "float64") -> Gradients:
    """dL/dx, dL/dh0, dL/dc0 and dL/dθ for every canonical block θ of the case (canonical keys,
    ``bR_*`` included: for an LSTM and GRU r, z the same as ``bW_*``, for a reset-after GRU's n
    its own). ``inputs`` carries the upstream gradients ``dy`` (required), ``dh_n``, ``dc_n``
    (zeros when None). ``dtype`` other than float64 computes in that dtype's arithmetic
    (:class:`~harness.reference.functions.Precision`: the noise floor)."""
    if inputs.dy is None:
        raise ValueError("backward needs the upstream gradient dy (a gradients: true case, or "
                         "harness.data.with_upstream)")
    prec = Precision(dtype)
    q = prec.round
    cell_backward = getattr(CELLS[case.cell], f"{case.cell}_backward")
    xp = array_namespace(inputs.x)
    B = inputs.x.shape[0]
    D, O = case.num_directions, case.out_size
    h_shape = (case.num_layers * D, B, O)
    c_shape = (case.num_layers * D, B, case.hidden_size)
    dh_n = inputs.dh_n if inputs.dh_n is not None else zeros(h_shape, inputs.x)
    dc_n = None
    if case.cell_kind.has_cell_state:
        dc_n = inputs.dc_n if inputs.dc_n is not None else zeros(c_shape, inputs.x)

    tapes: list[Tape] = []
    forward(case, canonical, inputs, prec, tapes)
    _, order = reading_order(inputs)
    dh0 = [None] * (case.num_layers * D)
    dc0 = [None] * (case.num_layers * D)
    params: dict[str, Array] = {}
    d_out = inputs.dy  # gradient of the current layer's output [B, T, D * O]
    for layer in reversed(range(case.num_layers)):
        d_in = None
        for k, d in enumerate(case.directions):
            s = layer * D + k
            dy = order(d_out[..., k * O:(k + 1) * O], d)  # padded steps: ignored
            dc = dc_n[s] if dc_n is not None else None
            block = canonical.block(layer, d)
            dx, dh0[s], dc0[s], grads = cell_backward(case, block, tapes[s], dy, dh_n[s], dc, prec)
            dx = order(dx, d)
            d_in = dx if d_in is None else q(d_in + dx)
            for name in block_shapes(case, layer):
                params[key(layer, d, name)] = grads[name]
        d_out = d_in
    return Gradients(
        dx=d_out,
        dh0=xp.stack(dh0),
        dc0=xp.stack(dc0) if case.cell_kind.has_cell_state else None,
        params={k: params[k] for k in expected_shapes(case)},  # canonical order
    )
