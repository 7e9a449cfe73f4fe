"""The CUDA device of the fused-step reference (:mod:`harness.reference.fast_cuda`): CuPy
arrays, one stream and one cuBLAS handle per direction, the product ``out = a @ b + beta out``
through cuBLAS's C API (so it may be captured in a CUDA graph), and the launch of a step
kernel of ``fast_cuda_steps.cu``. CuPy is imported when a :class:`CupyDevice` is made, so this
module imports without it; the tests' NumPy twin (``tests/support/fast_cuda_twin.py``) has the
same interface."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

STEPS_SOURCE = Path(__file__).with_name("fast_cuda_steps.cu")
KERNELS = ("lstm_step", "lstm_step_backward", "gru_step_after", "gru_step_before_rz",
           "gru_step_before_n", "gru_step_backward_after", "gru_step_backward_before_zn",
           "gru_step_backward_before_r")
THREADS = 256  # per block; one thread per (b, j) of a step's [B, H]


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

