"""One direction's time loops of the fused-step reference (:mod:`harness.reference.fast_cuda`):
the forward (:class:`ForwardLoop`) and the backward (:class:`BackwardLoop`) over buffers each
owns, one product and one kernel launch a step on the direction's stream, so that a loop
captured once as a CUDA graph replays for every layer; :func:`run_loops` runs the directions'
loops side by side. Layout: time-major [T, B, ...], one direction in its reading order."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from harness.spec import Case


def concat(p: dict[str, Any], kind: str, gates: tuple[str, ...], xp: Any) -> Any:
    return xp.concatenate([p[f"{kind}_{g}"] for g in gates])


class Loop:
    """One direction's step loop over buffers it owns: every layer loads its values into the
    same buffers, so a loop captured as a CUDA graph replays for each of them."""

    def __init__(self, dev: Any, case: Case, B: int, T: int, lengths: Any, graphs: bool,
                 k: int) -> None:
        self.dev, self.case, self.B, self.T, self.lengths = dev, case, B, T, lengths
        self.H = case.hidden_size
        self.G = len(case.gates)
        self.stream = dev.stream(k)
        self.graphs = graphs
        self._replay: Callable[[], None] | None = None

    def zeros(self, *shape: int) -> Any:
        return self.dev.xp.zeros(shape, dtype=np.float64)

    def steps(self) -> None:
        for t in self.times():
            self.step(t)

    def run(self) -> None:
        """The loop once, on this direction's stream (the graph: captured at the first run)."""
        if not self.graphs:
            with self.dev.on(self.stream):
                self.steps()
            return
        if self._replay is None:
            with self.dev.on(self.stream):  # cuBLAS sets up its workspace for this stream
                self.dev.gemm(*(self.zeros(self.H, self.H) for _ in range(3)))  # outside a capture
            self._replay = self.dev.capture(self.stream, self.steps)
        self._replay()

    def times(self) -> range:
        raise NotImplementedError

    def step(self, t: int) -> None:
        raise NotImplementedError


def run_loops(loops: list[Loop]) -> None:
    """Every direction's loop, each on its own stream. Eager, their steps are queued in turn
    (t of one direction, then t of the next), so the GPU overlaps the directions while Python
    queues; captured, each direction's graph is launched on its stream."""
    if loops[0].graphs:
        for loop in loops:
            loop.run()
        return
    dev = loops[0].dev
    for steps in zip(*(loop.times() for loop in loops), strict=True):
        for loop, t in zip(loops, steps, strict=True):
            with dev.on(loop.stream):
                loop.step(t)


class ForwardLoop(Loop):
    """The forward of one direction: gates [T, B, G*H] (Wx_t in; gate values out), states
    h, c [T + 1, B, H], y [T, B, H]; GRU: u [T, B, H] (what R_n multiplies' product, or its
    input: the backward's)."""

    def __init__(self, dev: Any, case: Case, B: int, T: int, lengths: Any, graphs: bool,
                 k: int) -> None:
        super().__init__(dev, case, B, T, lengths, graphs, k)
        H, G = self.H, self.G
        self.gates = self.zeros(T, B, G * H)
        self.h = self.zeros(T + 1, B, H)
        self.y = self.zeros(T, B, H)
        if case.cell_kind.has_cell_state:
            self.c = self.zeros(T + 1, B, H)
            self.RT = self.zeros(H, G * H)
        else:
            self.u = self.zeros(T, B, H)
            self.bR = self.zeros(G * H)
            if case.reset_after:
                self.RT = self.zeros(H, G * H)
                self.rec = self.zeros(B, G * H)
            else:
                self.RT_rz = self.zeros(H, 2 * H)
                self.RT_n = self.zeros(H, H)
                self.rec = self.zeros(B, 2 * H)
                self.rec_n = self.zeros(B, H)

    def times(self) -> range:
        return range(self.T)

    def load(self, p: dict[str, Any], x: Any, h0: Any, c0: Any | None) -> None:
        """Layer values into the buffers (on the current stream): x [T, B, in] in reading
        order, the canonical blocks ``p`` by name, the initial states."""
        xp, gates = self.dev.xp, self.case.gates
        W = concat(p, "W", gates, xp)
        R = concat(p, "R", gates, xp)
        T, B, F = x.shape
        Wx = self.gates.reshape(T * B, -1)
        xp.matmul(x.reshape(T * B, F), W.T, out=Wx)  # Wx = x Wᵀ + b, all steps at once
        if self.case.cell_kind.has_cell_state:
            Wx += concat(p, "bW", gates, xp) + concat(p, "bR", gates, xp)
            self.RT[...] = R.T
            self.c[0] = c0
        else:
            Wx += concat(p, "bW", gates, xp)
            self.bR[...] = concat(p, "bR", gates, xp)
            if self.case.reset_after:
                self.RT[...] = R.T
            else:
                self.RT_rz[...] = R[:2 * self.H].T
                self.RT_n[...] = R[2 * self.H:].T
        self.h[0] = h0

    def step(self, t: int) -> None:
        dev, B, H = self.dev, self.B, self.H
        if self.case.cell_kind.has_cell_state:
            dev.gemm(self.h[t], self.RT, self.gates[t], beta=1.0)  # Wx_t + h_prev Rᵀ
            dev.step("lstm_step", B, H, self.gates, self.c, self.h, self.y, self.lengths, t,
                     B, H)
        elif self.case.reset_after:
            dev.gemm(self.h[t], self.RT, self.rec)
            dev.step("gru_step_after", B, H, self.gates, self.rec, self.bR, self.u, self.h,
                     self.y, self.lengths, t, B, H)
        else:
            dev.gemm(self.h[t], self.RT_rz, self.rec)
            dev.step("gru_step_before_rz", B, H, self.gates, self.rec, self.bR, self.u, self.h,
                     t, B, H)
            dev.gemm(self.u[t], self.RT_n, self.rec_n)
            dev.step("gru_step_before_n", B, H, self.gates, self.rec_n, self.bR, self.h,
                     self.y, self.lengths, t, B, H)

    def tape(self, x: Any) -> SimpleNamespace:
        """Copies of what the backward reads (the buffers are the next layer's)."""
        kept = SimpleNamespace(x=x, gates=self.gates.copy(), h=self.h.copy())
        if self.case.cell_kind.has_cell_state:
            kept.c = self.c.copy()
        else:
            kept.u = self.u.copy()
        return kept


class BackwardLoop(Loop):
    """The backward of one direction, from the last step to the first: dA [T, B, G*H] (the
    pre-activations' gradients), dh, dc [B, H] (the state's gradient carried back); GRU:
    d_rec, the recurrent side's (reset_after: [T, B, 3H]; reset_before: d_rz [B, 2H] a step)."""

    def __init__(self, dev: Any, case: Case, B: int, T: int, lengths: Any, graphs: bool,
                 k: int) -> None:
        super().__init__(dev, case, B, T, lengths, graphs, k)
        H, G = self.H, self.G
        self.gates = self.zeros(T, B, G * H)
        self.h = self.zeros(T + 1, B, H)
        self.dy = self.zeros(T, B, H)
        self.dh = self.zeros(B, H)
        self.dA = self.zeros(T, B, G * H)
        if case.cell_kind.has_cell_state:
            self.c = self.zeros(T + 1, B, H)
            self.dc = self.zeros(B, H)
            self.R = self.zeros(G * H, H)
        else:
            self.u = self.zeros(T, B, H)
            if case.reset_after:
                self.R = self.zeros(G * H, H)
                self.d_rec = self.zeros(T, B, G * H)
            else:
                self.R_rz = self.zeros(2 * H, H)
                self.R_n = self.zeros(H, H)
                self.da_n = self.zeros(B, H)
                self.du = self.zeros(B, H)
                self.d_rz = self.zeros(B, 2 * H)

    def times(self) -> range:
        return range(self.T - 1, -1, -1)

    def load(self, p: dict[str, Any], tape: SimpleNamespace, dy: Any, dh_n: Any,
             dc_n: Any | None) -> None:
        xp = self.dev.xp
        R = concat(p, "R", self.case.gates, xp)
        self.gates[...] = tape.gates
        self.h[...] = tape.h
        self.dy[...] = dy
        self.dh[...] = dh_n
        if self.case.cell_kind.has_cell_state:
            self.c[...] = tape.c
            self.dc[...] = dc_n
            self.R[...] = R
        else:
            self.u[...] = tape.u
            if self.case.reset_after:
                self.R[...] = R
            else:
                self.R_rz[...] = R[:2 * self.H]
                self.R_n[...] = R[2 * self.H:]

    def step(self, t: int) -> None:
        dev, B, H = self.dev, self.B, self.H
        if self.case.cell_kind.has_cell_state:
            dev.step("lstm_step_backward", B, H, self.gates, self.c, self.dy, self.dh, self.dc,
                     self.dA, self.lengths, t, B, H)
            dev.gemm(self.dA[t], self.R, self.dh, beta=1.0)  # dh_prev = dA_t R
        elif self.case.reset_after:
            dev.step("gru_step_backward_after", B, H, self.gates, self.u, self.h, self.dy,
                     self.dh, self.dA, self.d_rec, self.lengths, t, B, H)
            dev.gemm(self.d_rec[t], self.R, self.dh, beta=1.0)
        else:
            dev.step("gru_step_backward_before_zn", B, H, self.gates, self.h, self.dy, self.dh,
                     self.dA, self.da_n, self.lengths, t, B, H)
            dev.gemm(self.da_n, self.R_n, self.du)  # du = da_n R_n
            dev.step("gru_step_backward_before_r", B, H, self.gates, self.h, self.du, self.dh,
                     self.dA, self.d_rz, self.lengths, t, B, H)
            dev.gemm(self.d_rz, self.R_rz, self.dh, beta=1.0)

    def parameter_gradients(self, p: dict[str, Any], tape: SimpleNamespace
                            ) -> tuple[Any, dict[str, Any]]:
        """dx [T, B, in] and every block's gradient, over all steps at once (after the loop)."""
        xp, case, H = self.dev.xp, self.case, self.H
        T, B, F = tape.x.shape
        dA = self.dA.reshape(T * B, self.G * H)
        h_prev = self.h[:T].reshape(T * B, H)
        dW = dA.T @ tape.x.reshape(T * B, F)
        db = xp.sum(dA, axis=0)
        if case.cell_kind.has_cell_state:
            dR, dbR = dA.T @ h_prev, db
        elif case.reset_after:
            d_rec = self.d_rec.reshape(T * B, self.G * H)
            dR, dbR = d_rec.T @ h_prev, xp.sum(d_rec, axis=0)
        else:  # R_n multiplies u = r ⊙ h_prev; bR_n sits beside bW_n: the same gradient
            dR = xp.concatenate([dA[:, :2 * H].T @ h_prev,
                                 dA[:, 2 * H:].T @ self.u.reshape(T * B, H)])
            dbR = db
        grads = {}
        for k, gate in enumerate(case.gates):
            rows = slice(k * H, (k + 1) * H)
            grads[f"W_{gate}"] = dW[rows]
            grads[f"R_{gate}"] = dR[rows]
            grads[f"bW_{gate}"] = db[rows]
            grads[f"bR_{gate}"] = dbR[rows].copy()
        dx = (dA @ concat(p, "W", case.gates, xp)).reshape(T, B, F)
        return dx, grads

