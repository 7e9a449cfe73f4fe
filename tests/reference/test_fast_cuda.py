"""The fused-step GPU reference (``harness/reference/fast_cuda.py``) against the generic NumPy
reference, to 1e-12: forward and backward, LSTM and GRU (reset after and before), one or two
directions, stacked layers, variable lengths.

Everywhere: its drivers with the NumPy twin of its kernels (``tests/support/fast_cuda_twin.py``),
and the kernels' source compiled by nvcc where one is installed. On a GPU (marker ``gpu``): the
CUDA kernels themselves, eager and replayed as CUDA graphs.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from support.case_factory import case_maker
from support.fast_cuda_twin import NumpyDevice

from harness import data, params, reference
from harness.data import Inputs
from harness.params import Canonical
from harness.reference import cuda_device, fast_cuda

TOL = 1e-12

make = case_maker(dtype="float64", seed=5, initial_state="random", gradients=True,
                  hidden_size=5, batch=4, seq_len=7)

CASES = {
    "lstm": dict(),
    "lstm-bidirectional-2-layers-varlen": dict(direction="bidirectional", num_layers=2,
                                               seq_lengths=[7, 3, 1, 5]),
    "lstm-reverse-varlen": dict(direction="reverse", seq_lengths=[2, 7, 4, 6]),
    "gru-reset-after-bidirectional-varlen": dict(cell="gru", direction="bidirectional",
                                                 seq_lengths=[7, 3, 1, 5], num_layers=2),
    "gru-reset-before-bidirectional-varlen": dict(cell="gru", reset_after=False,
                                                  direction="bidirectional", num_layers=2,
                                                  seq_lengths=[4, 7, 2, 6]),
    "gru-reset-before-reverse": dict(cell="gru", reset_after=False, direction="reverse"),
}


def prepared(name: str) -> tuple:
    case = make(name=name, **CASES[name])
    canonical = params.generate(case)
    inputs = data.generate(case)
    ref = reference.run(case, canonical, inputs)
    ref.grads = reference.gradients(case, canonical, inputs)
    return case, canonical, inputs, ref


def worst_errors(out, ref, to_numpy=np.asarray) -> dict[str, float]:
    got = out.named() | out.grads.named()
    want = ref.named() | ref.grads.named()
    assert got.keys() == want.keys()
    errors = {}
    for k, v in want.items():
        g = to_numpy(got[k])
        assert g.shape == v.shape, k
        errors[k] = float(np.abs(g - v).max())
    for layer, (g, v) in enumerate(zip(out.y_layers, ref.y_layers, strict=True)):
        errors[f"y_layers[{layer}]"] = float(np.abs(to_numpy(g) - v).max())
    return errors


@pytest.mark.parametrize("name", CASES)
def test_drivers_with_the_numpy_twin_match_the_reference(name: str):
    case, canonical, inputs, ref = prepared(name)
    out = fast_cuda.run(NumpyDevice(), case, canonical, inputs)
    errors = worst_errors(out, ref)
    bad = {k: e for k, e in errors.items() if e > TOL}
    assert not bad, f"{name}: fast path's drivers differ from the reference: {bad}"


def test_what_the_kernels_do_not_cover_is_named():
    assert fast_cuda.unsupported(make()) == []
    assert fast_cuda.unsupported(make(peepholes=True, proj_size=2, cell_clip=1.0)) == [
        "peepholes", "projection", "cell_clip"]
    assert fast_cuda.unsupported(make(recurrent_activation="hard_sigmoid_keras3")) == [
        "recurrent activation hard_sigmoid_keras3"]


def column_major_dgemm(M, N, K, A, lda, B, ldb, beta, C, ldc):
    """BLAS dgemm without transposes, as cuBLAS reads its flat, column-major buffers."""
    for i in range(M):
        for j in range(N):
            total = sum(A[i + l * lda] * B[l + j * ldb] for l in range(K))
            C[i + j * ldc] = total + beta * C[i + j * ldc]


@pytest.mark.parametrize("beta", [0.0, 1.0])
@pytest.mark.parametrize("m, n, k", [(3, 5, 4), (1, 4, 2), (4, 1, 3), (2, 3, 1)])
def test_the_row_major_product_as_cublas_is_called(m, n, k, beta):
    """CupyDevice.gemm's arguments: b's buffer first, then a's (row-major is column-major
    transposed)."""
    rng = np.random.default_rng(0)
    a, b, out = rng.random((m, k)), rng.random((k, n)), rng.random((m, n))
    want = a @ b + beta * out
    M, N, K, lda, ldb, ldc = cuda_device.row_major_gemm(m, n, k)
    flat = out.ravel()  # a view: C-contiguous
    column_major_dgemm(M, N, K, b.ravel(), lda, a.ravel(), ldb, beta, flat, ldc)
    np.testing.assert_allclose(out, want, rtol=1e-15)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_kernels_compile(tmp_path):
    """The kernels' source compiles as CuPy compiles it (no fused multiply-add)."""
    source = str(cuda_device.STEPS_SOURCE)
    out = subprocess.run(["nvcc", "--fmad=false", "-arch=sm_80", "-c", source,
                          "-o", str(tmp_path / "steps.o")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    symbols = subprocess.run(["nm", str(tmp_path / "steps.o")], capture_output=True, text=True)
    for name in cuda_device.KERNELS:
        assert name in symbols.stdout, f"{name} is not a kernel of {cuda_device.STEPS_SOURCE.name}"


# On a GPU --------------------------------------------------------------------------------------

def cupy_device():
    """CuPy's device. Only CuPy missing skips (a GPU runner installs it: extra ``gpu``); CuPy
    failing to reach its GPU fails the test, as any other error. Where no GPU is visible these
    tests are deselected (tests/conftest.py); ``--require-gpu`` fails that skip too."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed (extra gpu)")
    count = cupy.cuda.runtime.getDeviceCount()
    assert count > 0, "CuPy sees no CUDA device"
    return cuda_device.CupyDevice(), cupy


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("name", CASES)
def test_cuda_kernels_match_the_reference(name: str, graphs: bool):
    dev, cupy = cupy_device()
    case, canonical, inputs, ref = prepared(name)

    def on_gpu(a):
        return None if a is None else cupy.asarray(np.asarray(a, dtype=np.float64))

    gpu_inputs = Inputs(x=on_gpu(inputs.x), h0=on_gpu(inputs.h0), c0=on_gpu(inputs.c0),
                        seq_lengths=inputs.seq_lengths, dy=on_gpu(inputs.dy),
                        dh_n=on_gpu(inputs.dh_n), dc_n=on_gpu(inputs.dc_n))
    gpu_canonical = Canonical({k: on_gpu(v) for k, v in canonical.tensors.items()})
    out = fast_cuda.run(dev, case, gpu_canonical, gpu_inputs, graphs=graphs)
    errors = worst_errors(out, ref, cupy.asnumpy)
    bad = {k: e for k, e in errors.items() if e > TOL}
    assert not bad, f"{name}: the CUDA kernels differ from the reference: {bad}"


# The reference-cuda adapter's choice of route -----------------------------------------------------

@pytest.mark.parametrize("fields, fused", [
    (dict(cell="lstm", num_layers=2, direction="bidirectional", seq_lengths=[7, 3, 1, 5]), True),
    (dict(cell="gru", reset_after=False), True),
    (dict(cell="lstm", peepholes=True), False),
], ids=["lstm-fused", "gru-fused", "peepholes-generic"])
def test_reference_cuda_runs_the_fused_steps_where_they_cover_the_case(monkeypatch, fields,
                                                                      fused):
    """With a CuPy backend (here NumPy arrays and the kernels' twin standing in) the adapter
    runs the fused steps for a case they cover, the generic reference otherwise, and says so on
    the pair; either way the NumPy reference's results to 1e-12."""
    from harness.adapters import reference_cuda

    ran = []
    stand_in = reference_cuda.Backend("cupy", np.asarray, np.asarray, lambda: {})
    monkeypatch.setattr(reference_cuda, "backend", lambda: stand_in)
    monkeypatch.setattr(reference_cuda, "fast_device", lambda: ran.append(1) or NumpyDevice())
    adapter = reference_cuda.ReferenceCUDA()
    case = make(**fields)
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    ref.grads = reference.gradients(case, canonical, inputs)
    assert bool(ran) == fused
    note = adapter.route_note(case)
    assert (note is None) == fused, note
    if not fused:
        assert "peepholes" in note
    assert max(worst_errors(out, ref).values()) <= TOL
