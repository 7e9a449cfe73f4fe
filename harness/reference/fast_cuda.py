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

The device side is an object with a small interface (:class:`CupyDevice`): its array module,
streams, the product ``out = a @ b + beta out`` and a step kernel's launch, so the drivers here
also run on CPU with NumPy stand-ins for the kernels (the tests' twin of each kernel), which
checks their bookkeeping (buffers, directions, lengths, layers) without a GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from harness.data import Gradients, Inputs, Outputs
from harness.params import Canonical, expected_shapes, key
from harness.reference.layers import reversal_index
from harness.spec import Case

STEPS_SOURCE = Path(__file__).with_name("fast_cuda_steps.cu")
KERNELS = ("lstm_step", "lstm_step_backward", "gru_step_after", "gru_step_before_rz",
           "gru_step_before_n", "gru_step_backward_after", "gru_step_backward_before_zn",
           "gru_step_backward_before_r")
THREADS = 256  # per block; one thread per (b, j) of a step's [B, H]


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


def row_major_gemm(m: int, n: int, k: int) -> tuple[int, int, int, int, int, int]:
    """cuBLAS's (m, n, k, lda, ldb, ldc) for the row-major, C-contiguous out [m, n] = a [m, k]
    @ b [k, n], called with b first: cuBLAS is column-major, and a row-major array is its
    transpose in column-major, so it computes outᵀ [n, m] = bᵀ [n, k] aᵀ [k, m], no
    transposes, each leading dimension a row's length."""
    return n, m, k, n, k, n


class CuBLAS:
    """cuBLAS's C API through ctypes, for the products of a step: CuPy's own cuBLAS bindings
    refuse to run while a stream is captured (NotImplementedError, cupy_backends'
    ``cublas.setStream``), though cuBLAS supports it (its "CUDA Graphs support"). Loaded
    from the libcublas CuPy loaded (``/proc/self/maps``), else by its usual names."""

    OP_N = 0  # CUBLAS_OP_N

    def __init__(self) -> None:
        lib = ctypes.CDLL(self._path())
        c_int, ptr = ctypes.c_int, ctypes.c_void_p
        self._create = lib.cublasCreate_v2
        self._create.argtypes = [ctypes.POINTER(ptr)]
        self._set_stream = lib.cublasSetStream_v2
        self._set_stream.argtypes = [ptr, ptr]
        self._dgemm = lib.cublasDgemm_v2
        self._dgemm.argtypes = [ptr, c_int, c_int, c_int, c_int, c_int, ptr, ptr, c_int, ptr,
                                c_int, ptr, ptr, c_int]
        for f in (self._create, self._set_stream, self._dgemm):
            f.restype = c_int

    @staticmethod
    def _path() -> str:
        try:
            with open("/proc/self/maps") as maps:
                loaded = {line.split()[-1] for line in maps if "/libcublas.so" in line}
        except OSError:
            loaded = set()
        for path in sorted(loaded):
            return path
        for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
            try:
                ctypes.CDLL(name)
            except OSError:
                continue
            return name
        raise OSError("libcublas is not loaded and not found by name")

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed: cuBLAS status {status}")

    def create(self) -> int:
        handle = ctypes.c_void_p()
        self._check(self._create(ctypes.byref(handle)), "cublasCreate")
        return handle.value

    def set_stream(self, handle: int, stream: int) -> None:
        self._check(self._set_stream(handle, stream), "cublasSetStream")

    def dgemm(self, handle: int, m: int, n: int, k: int, alpha: int, A: int, lda: int, B: int,
              ldb: int, beta: int, C: int, ldc: int) -> None:
        self._check(self._dgemm(handle, self.OP_N, self.OP_N, m, n, k, alpha, A, lda, B, ldb,
                                beta, C, ldc), "cublasDgemm")


class CupyDevice:
    """CuPy arrays, cuBLAS products and the kernels of ``fast_cuda_steps.cu`` (compiled once,
    with --fmad=false: the reference's roundings, see there).

    Each direction has a stream of its own (:meth:`stream`), kept for the device's life, and a
    cuBLAS handle of its own: products of two directions run at once, and one handle's
    workspace shared by two streams at once would be a race."""

    def __init__(self) -> None:
        import cupy

        self.xp = cupy
        self._cupy = cupy
        try:  # CuPy loads libcublas, which :class:`CuBLAS` then finds
            cupy.cuda.device.get_cublas_handle()
        except Exception:  # it finds one by name
            pass
        self._cublas = CuBLAS()
        module = cupy.RawModule(code=STEPS_SOURCE.read_text(), options=("--fmad=false",))
        self._kernels = {name: module.get_function(name) for name in KERNELS}
        self._streams: list[Any] = []
        self._handles: dict[int, int] = {}  # stream pointer -> its cuBLAS handle
        # alpha and beta: host scalars, which cuBLAS reads at the call (also when captured)
        self._scalars = {0.0: np.zeros(1), 1.0: np.ones(1)}

    def stream(self, k: int) -> Any:
        """Direction k's stream (and cuBLAS handle)."""
        while len(self._streams) <= k:
            stream = self._cupy.cuda.Stream(non_blocking=True)
            self._streams.append(stream)
            self._handles[stream.ptr] = self._cublas.create()
        return self._streams[k]

    def current_stream(self) -> Any:
        return self._cupy.cuda.get_current_stream()

    def on(self, stream: Any) -> Any:
        """A context in which work goes to ``stream``."""
        return stream

    def after(self, stream: Any, other: Any) -> None:
        """Work queued on ``stream`` from now on waits for the work queued on ``other``."""
        stream.wait_event(other.record())

    def gemm(self, a: Any, b: Any, out: Any, beta: float = 0.0) -> None:
        """out = a @ b + beta out (beta 0 or 1), one cuBLAS call on the current stream, which is
        a direction's (:meth:`stream`). C-contiguous float64 operands: no copies, nothing
        allocated, so it may be captured in a graph."""
        (m, k), n = a.shape, b.shape[1]
        assert b.shape[0] == k and out.shape == (m, n)
        assert a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
        assert a.dtype == b.dtype == out.dtype == np.float64
        stream = self.current_stream().ptr
        handle = self._handles[stream]
        self._cublas.set_stream(handle, stream)
        cm, cn, ck, lda, ldb, ldc = row_major_gemm(m, n, k)
        self._cublas.dgemm(handle, cm, cn, ck, self._scalars[1.0].ctypes.data, b.data.ptr, lda,
                           a.data.ptr, ldb, self._scalars[beta].ctypes.data, out.data.ptr, ldc)

    def step(self, name: str, B: int, H: int, *args: Any) -> None:
        """Launch kernel ``name`` over a step's [B, H] on the current stream (ints as C int)."""
        args = tuple(np.int32(a) if isinstance(a, int) else a for a in args)
        self._kernels[name](((B * H + THREADS - 1) // THREADS,), (THREADS,), args)

    def capture(self, stream: Any, steps: Callable[[], None]) -> Callable[[], None]:
        """``steps`` captured once on ``stream`` as a CUDA graph; returns its replay."""
        with stream:
            stream.begin_capture()
            try:
                steps()
            finally:
                graph = stream.end_capture()
        return lambda: graph.launch(stream)


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


def _concat(p: dict[str, Any], kind: str, gates: tuple[str, ...], xp: Any) -> Any:
    return xp.concatenate([p[f"{kind}_{g}"] for g in gates])


# One direction's time loops --------------------------------------------------------------------

class _Loop:
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


def run_loops(loops: list[_Loop]) -> None:
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


class ForwardLoop(_Loop):
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
        W = _concat(p, "W", gates, xp)
        R = _concat(p, "R", gates, xp)
        T, B, F = x.shape
        Wx = self.gates.reshape(T * B, -1)
        xp.matmul(x.reshape(T * B, F), W.T, out=Wx)  # Wx = x Wᵀ + b, all steps at once
        if self.case.cell_kind.has_cell_state:
            Wx += _concat(p, "bW", gates, xp) + _concat(p, "bR", gates, xp)
            self.RT[...] = R.T
            self.c[0] = c0
        else:
            Wx += _concat(p, "bW", gates, xp)
            self.bR[...] = _concat(p, "bR", gates, xp)
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


class BackwardLoop(_Loop):
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
        R = _concat(p, "R", self.case.gates, xp)
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
        dx = (dA @ _concat(p, "W", case.gates, xp)).reshape(T, B, F)
        return dx, grads


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

    def _loops(self, kind: type[_Loop]) -> list[Any]:
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
