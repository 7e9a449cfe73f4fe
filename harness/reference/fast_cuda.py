"""The float64 reference's forward and backward on a CUDA GPU in fused steps: per time step one
cuBLAS product and one fused element-wise kernel (``fast_cuda_steps.cu``), the directions of a
layer on their own CUDA streams, and optionally each direction's step loop captured once as a
CUDA graph and replayed for every layer.

The generic reference (``lstm.py``, ``gru.py``, ``*_backward.py``) stays the definition: this is
the same equations, operation for operation in the same order (``fast_cuda_steps.cu``), judged
against it to 1e-12 (``tests/reference/test_fast_cuda.py``). It covers what those kernels do
(:func:`unsupported` says what they do not: the adapter then runs the generic reference).

Layout: time-major [T, B, ...] throughout, one direction in its reading order (a reverse
direction's input reversed within each sequence's length, as ``layers.reading_order``); the
states of all steps are kept ([T + 1, B, H]: [0] the initial state), which the backward reads.

The device side is an object with a small interface
(:class:`harness.reference.cuda_device.CupyDevice`): its array module, streams, the product
``out = a @ b + beta out`` and a step kernel's launch, so the drivers here and the loops
(:mod:`harness.reference.fast_cuda_loops`) also run on CPU with NumPy stand-ins for the kernels
(the tests' twin of each kernel), which checks their bookkeeping (buffers, directions, lengths,
layers) without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from harness.data import Gradients, Inputs, Outputs
from harness.params import Canonical, expected_shapes, key
from harness.reference.fast_cuda_loops import BackwardLoop, ForwardLoop, Loop, run_loops
from harness.reference.layers import reversal_index
from harness.spec import Case


def unsupported(case: Case) -> list[str]:
    """The case's features the fused kernels do not compute (empty: this module runs it)."""
    why = []
    if case.recurrent_activation != "sigmoid":
        why.append(f"recurrent activation {case.recurrent_activation}")
    for feature in ("peepholes", "input_forget"):
        if getattr(case, feature):
            why.append(feature)
    if case.proj_size:
        why.append("projection")
    for clip in ("cell_clip", "proj_clip", "gate_clip"):
        if getattr(case, clip) is not None:
            why.append(clip)
    if case.forget_bias:
        why.append("forget_bias")
    return why


# Reading order, time-major ---------------------------------------------------------------------

def time_major_order(xp: Any, lengths: np.ndarray, T: int) -> Callable[[Any, int], Any]:
    """``order(a, d)``: a [T, B, ...] array in the order direction d reads it (``a`` itself for
    the forward direction, a new array for the reverse one): ``layers.reading_order``,
    time-major. Its own inverse."""
    if bool((lengths == T).all()):
        return lambda a, d: a if d == 0 else xp.ascontiguousarray(a[::-1])
    steps = xp.asarray(reversal_index(lengths, T).T)  # [T, B]: the step each (t, b) reads
    rows = xp.asarray(np.arange(len(lengths))[None, :])
    return lambda a, d: a if d == 0 else a[steps, rows]


# The drivers -----------------------------------------------------------------------------------

class FastReference:
    """The forward (and the backward) of a case on the device ``dev``, arrays in and out of
    ``dev.xp`` (float64). ``graphs``: each direction's loop captured once as a CUDA graph and
    replayed for every layer."""

    def __init__(self, dev: Any, case: Case, inputs: Inputs, graphs: bool = False) -> None:
        assert not unsupported(case), unsupported(case)
        self.dev, self.case, self.graphs = dev, case, graphs
        self.B, self.T = inputs.x.shape[:2]
        self.lengths = dev.xp.asarray(np.asarray(inputs.lengths, dtype=np.int64))
        self.order = time_major_order(dev.xp, np.asarray(inputs.lengths), self.T)
        self._forward_loops: list[ForwardLoop] | None = None
        self._backward_loops: list[BackwardLoop] | None = None

    def _loops(self, kind: type[Loop]) -> list[Any]:
        return [kind(self.dev, self.case, self.B, self.T, self.lengths, self.graphs, k)
                for k in range(self.case.num_directions)]

    def _run(self, loops: list[Any]) -> None:
        """The loops on their streams, after the work queued so far on the current stream (the
        loads), and before what is queued on it next (reading their results). Everything but
        the loops runs on the current stream: big products on two streams at once would share
        its cuBLAS handle."""
        main = self.dev.current_stream()
        for loop in loops:
            self.dev.after(loop.stream, main)
        run_loops(loops)
        for loop in loops:
            self.dev.after(main, loop.stream)

    def forward(self, canonical: Canonical, inputs: Inputs, tapes: list | None = None
                ) -> Outputs:
        """Every layer and direction, layer by layer; ``tapes``: a list each direction's tape
        is appended to (index layer × D + k), for :meth:`gradients`."""
        xp, case, T = self.dev.xp, self.case, self.T
        if self._forward_loops is None:
            self._forward_loops = self._loops(ForwardLoop)
        loops, D = self._forward_loops, case.num_directions
        layer_in = xp.ascontiguousarray(xp.transpose(inputs.x, (1, 0, 2)))  # [T, B, in]
        y_layers, h_n, c_n = [], [], []
        for layer in range(case.num_layers):
            xs = [self.order(layer_in, d) for d in case.directions]
            for k, d in enumerate(case.directions):
                s = layer * D + k
                c0 = inputs.c0[s] if case.cell_kind.has_cell_state else None
                loops[k].load(canonical.block(layer, d), xs[k], inputs.h0[s], c0)
            self._run(loops)
            ys = []
            for k, d in enumerate(case.directions):
                loop = loops[k]
                y = self.order(loop.y, d)
                ys.append(y.copy() if y is loop.y else y)
                h_n.append(loop.h[T].copy())
                if case.cell_kind.has_cell_state:
                    c_n.append(loop.c[T].copy())
                if tapes is not None:
                    tapes.append(loop.tape(xs[k]))
            layer_in = xp.concatenate(ys, axis=-1)
            y_layers.append(layer_in)
        batch_major = [xp.ascontiguousarray(xp.transpose(y, (1, 0, 2))) for y in y_layers]
        return Outputs(y=batch_major[-1], h_n=xp.stack(h_n),
                       c_n=xp.stack(c_n) if case.cell_kind.has_cell_state else None,
                       y_layers=batch_major)

    def gradients(self, canonical: Canonical, inputs: Inputs, tapes: list) -> Gradients:
        """The backward of the loss in ``harness.data`` (``backward.py``'s), from the tapes of
        :meth:`forward`."""
        xp, case = self.dev.xp, self.case
        if self._backward_loops is None:
            self._backward_loops = self._loops(BackwardLoop)
        loops = self._backward_loops
        B, D, H = self.B, case.num_directions, case.hidden_size
        n = case.num_layers * D
        dh_n = inputs.dh_n if inputs.dh_n is not None else xp.zeros((n, B, H))
        dc_n = inputs.dc_n if inputs.dc_n is not None else xp.zeros((n, B, H))
        d_out = xp.ascontiguousarray(xp.transpose(inputs.dy, (1, 0, 2)))  # [T, B, D*H]
        dh0: list[Any] = [None] * n
        dc0: list[Any] = [None] * n
        params: dict[str, Any] = {}
        for layer in reversed(range(case.num_layers)):
            for k, d in enumerate(case.directions):
                s = layer * D + k
                dy = self.order(d_out[..., k * H:(k + 1) * H], d)
                loops[k].load(canonical.block(layer, d), tapes[s], dy, dh_n[s],
                              dc_n[s] if case.cell_kind.has_cell_state else None)
            self._run(loops)
            dxs = []
            for k, d in enumerate(case.directions):
                s, loop = layer * D + k, loops[k]
                dx, grads = loop.parameter_gradients(canonical.block(layer, d), tapes[s])
                dxs.append(self.order(dx, d))
                dh0[s] = loop.dh.copy()
                if case.cell_kind.has_cell_state:
                    dc0[s] = loop.dc.copy()
                for name, g in grads.items():
                    params[key(layer, d, name)] = g
            d_out = dxs[0] if len(dxs) == 1 else dxs[0] + dxs[1]
        return Gradients(
            dx=xp.ascontiguousarray(xp.transpose(d_out, (1, 0, 2))),
            dh0=xp.stack(dh0),
            dc0=xp.stack(dc0) if case.cell_kind.has_cell_state else None,
            params={k: params[k] for k in expected_shapes(case)},  # canonical order
        )


def run(dev: Any, case: Case, canonical: Canonical, inputs: Inputs, graphs: bool = False
        ) -> Outputs:
    """The case's outputs and, in a gradient case, its gradients (arrays of ``dev.xp``)."""
    fast = FastReference(dev, case, inputs, graphs)
    tapes: list | None = [] if case.gradients else None
    out = fast.forward(canonical, inputs, tapes)
    if case.gradients:
        out.grads = fast.gradients(canonical, inputs, tapes)
    return out
