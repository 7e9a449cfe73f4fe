"""The GPU adapters: ``torch-cudnn``, ``torch-cudnn-tf32``, ``tf-cudnn``, ``keras-cudnn`` and
``reference-cuda``.

Without a GPU (CPU machines, CI) they must import and report themselves unavailable with a
reason; those checks run everywhere. The ``gpu``-marked tests run them against the float64
reference and check the cuDNN buffer layout (``tf-cudnn-params``) against the buffers
TensorFlow and PyTorch get from cuDNN; they skip, with the adapter's own reason, where no GPU is
visible. The packing logic itself is tested on CPU in ``tests/layouts/test_cudnn_packing.py``.
"""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters import get_adapter
from harness.layouts import get_layout
from harness.spec import Case

GPU_ADAPTERS = ["torch-cudnn", "torch-cudnn-tf32", "tf-cudnn", "keras-cudnn", "reference-cuda"]

# max abs error against the float64 reference, per dtype (docs/layouts.md, Precision of float32
# frameworks)
ATOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 3e-2}
ATOL_TF32 = 5e-3


make = case_maker(hidden_size=5, seed=11, initial_state="random")


def adapter_or_skip(name: str):
    adapter = get_adapter(name)
    reason = adapter.unavailable_reason()
    if reason:
        pytest.skip(f"{name}: {reason}")
    return adapter


def max_errors(out, ref) -> dict[str, float]:
    return {k: float(np.abs(v - ref.named()[k]).max()) for k, v in out.named().items()}


# Everywhere: importable, and unavailable with a reason when there is no GPU ------------------

def test_importing_the_registry_imports_no_framework():
    code = ("import sys, harness.adapters, harness.cudnn, harness.layouts; "
            "print(sorted(m for m in ('tensorflow', 'torch', 'cupy', 'tf_keras', 'keras') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", GPU_ADAPTERS)
def test_adapter_is_a_gpu_adapter_with_a_reason_when_unavailable(name: str):
    adapter = get_adapter(name)
    assert adapter.device == "gpu"
    assert adapter.framework in ("torch", "tensorflow", "keras", "cupy")
    reason = adapter.unavailable_reason()
    if reason is None:
        pytest.skip(f"{name} is available here")
    assert isinstance(reason, str) and len(reason) > 10
    assert any(w in reason for w in ("GPU", "CUDA", "cuDNN", "not installed")), reason


def test_tf32_setting_is_restored():
    """The TF32 switch of the torch adapters restores PyTorch's setting, also on error."""
    torch = pytest.importorskip("torch")
    from harness.adapters.torch_cudnn import cudnn_rnn_tf32

    rnn = getattr(torch.backends.cudnn, "rnn", None)
    if rnn is not None and hasattr(rnn, "fp32_precision"):  # torch >= 2.9
        where, name, off, on = rnn, "fp32_precision", "ieee", "tf32"
    else:  # older torch: the legacy flag
        where, name, off, on = torch.backends.cudnn, "allow_tf32", False, True
    before = getattr(where, name)
    with cudnn_rnn_tf32(torch, allow=False):
        assert getattr(where, name) == off
    assert getattr(where, name) == before
    with pytest.raises(RuntimeError, match="boom"), cudnn_rnn_tf32(torch, allow=True):
        assert getattr(where, name) == on
        raise RuntimeError("boom")
    assert getattr(where, name) == before


def test_tf32_adapter_declares_its_tolerance_and_dtype():
    plain, tf32 = get_adapter("torch-cudnn"), get_adapter("torch-cudnn-tf32")
    assert tf32.tolerances["float32"].atol == ATOL_TF32
    assert not plain.tolerances
    assert "TF32" in tf32.not_applicable_reason(make(cell="lstm", dtype="float16"))
    assert plain.not_applicable_reason(make(cell="lstm", dtype="bfloat16")) is None


def test_reference_cuda_glue_with_a_stand_in_cupy(monkeypatch):
    """reference-cuda's plumbing on CPU: a stand-in ``cupy`` whose arrays are NumPy's. The
    adapter must move every array through the backend and give the NumPy reference's results
    exactly."""
    moved = []

    def asarray(a):
        moved.append(a.shape)
        return np.asarray(a)

    fake = types.ModuleType("cupy")
    fake.__version__ = "stand-in"
    fake.asarray, fake.asnumpy = asarray, np.asarray
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    from harness.adapters.reference_cuda import ReferenceCUDA

    adapter = ReferenceCUDA()
    assert adapter.unavailable_reason() is None
    case = make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2, seq_lengths=[6, 3, 1])
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    assert moved
    for k, v in ref.named().items():
        np.testing.assert_array_equal(out.named()[k], v)


@pytest.mark.torch
@pytest.mark.parametrize("case", [
    make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2, seq_lengths=[6, 3, 1],
         peepholes=True, gradients=True),
    make(cell="gru", reset_after=False, direction="reverse", gradients=True),
], ids=["lstm-bidir-proj-peepholes-varlen", "gru-reset-before-reverse"])
def test_reference_cuda_torch_backend_glue_on_cpu_tensors(monkeypatch, case):
    """The torch backend's plumbing, forward and backward, with torch CPU tensors standing in
    for CUDA ones (the same generic reference code; only the device differs)."""
    torch = pytest.importorskip("torch")
    from harness.adapters import reference_cuda

    cpu = reference_cuda.Backend("torch", torch.from_numpy, lambda a: a.numpy(),
                                 lambda: {"torch": torch.__version__})
    monkeypatch.setattr(reference_cuda, "backend", lambda: cpu)
    adapter = reference_cuda.ReferenceCUDA()
    canonical, inputs = params.generate(case), data.with_upstream(case, data.generate(case))
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    grads = reference.gradients(case, canonical, inputs)
    assert max(max_errors(out, ref).values()) < 1e-13
    assert out.grads is not None and sorted(out.grads.params) == sorted(grads.params)
    for k, v in grads.params.items():
        assert float(np.abs(out.grads.params[k] - v).max()) < 1e-13, k
    assert float(np.abs(out.grads.dx - grads.dx).max()) < 1e-13


# On a GPU: against the reference ------------------------------------------------------------

CASES = [
    make(cell="lstm", initial_state="zeros"),
    make(cell="lstm", num_layers=2, bidirectional=True, forget_bias=0.5),
    make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2, seq_lengths=[6, 3, 1]),
    make(cell="gru", seq_lengths=[2, 6, 4]),
    make(cell="gru", num_layers=2, bidirectional=True, seq_lengths=[6, 3, 1]),
]


def case_id(c: Case) -> str:
    bits = [c.cell, f"L{c.num_layers}", c.dir_mode[:5]]
    bits += [f"p{c.proj_size}"] * bool(c.proj_size) + ["lengths"] * bool(c.seq_lengths)
    return "-".join(bits)


def applicable_pairs() -> list:
    """(adapter, case) for each case in each dtype the cuDNN adapter runs: a pair it declares
    not applicable is no test, rather than a skipped one (asked of its capabilities: no
    framework is imported)."""
    return [pytest.param(name, case, id=f"{name}-{case_id(case)}-{case.dtype}")
            for name in ["torch-cudnn", "torch-cudnn-tf32", "tf-cudnn", "keras-cudnn"]
            for base in CASES
            for dtype in ["float32", "float64", "float16", "bfloat16"]
            for case in [base.model_copy(update={"dtype": dtype})]
            if get_adapter(name).not_applicable_reason(case) is None]


def test_each_cudnn_adapter_runs_some_of_the_cases_in_float32():
    """The pairs left out are the ones an adapter declares it cannot run, not all of them."""
    ran = {(p.values[0], case_id(p.values[1])) for p in applicable_pairs()
           if p.values[1].dtype == "float32"}
    for name in ["torch-cudnn", "torch-cudnn-tf32", "tf-cudnn"]:  # every geometry
        assert {n for a, n in ran if a == name} == set(map(case_id, CASES)), name
    assert len({n for a, n in ran if a == "keras-cudnn"}) >= 2  # no projection, no lengths


@pytest.mark.gpu
@pytest.mark.parametrize("name, case", applicable_pairs())
def test_gpu_adapter_matches_reference(name: str, case: Case):
    adapter = adapter_or_skip(name)
    dtype = case.dtype
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    errs = max_errors(out, ref)
    atol = ATOL_TF32 if name.endswith("tf32") else ATOL[dtype]
    assert max(errs.values()) < atol, f"{name} {case_id(case)} {dtype}: {errs}"
    if case.seq_lengths is not None:  # cuDNN writes zeros at padded steps
        valid = np.arange(case.seq_len)[None, :] < inputs.lengths[:, None]
        assert (out.y[~valid] == 0).all()


@pytest.mark.gpu
def test_torch_cudnn_tf32_off_is_below_tf32_tolerance():
    """With TF32 off, float32 cuDNN is float32-accurate at a size where TF32 would not be."""
    adapter = adapter_or_skip("torch-cudnn")
    case = make(cell="lstm", input_size=64, hidden_size=128, seq_len=40, batch=8, dtype="float32")
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    assert max(max_errors(out, reference.run(case, canonical, inputs)).values()) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES + [make(cell="lstm", peepholes=True, cell_clip=0.8,
                                               proj_size=2, proj_clip=0.4, direction="reverse",
                                               gate_clip=1.5, forget_bias=1.0)], ids=case_id)
def test_reference_cuda_matches_numpy(case: Case):
    adapter = adapter_or_skip("reference-cuda")
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    assert max(max_errors(out, ref).values()) < 1e-12
    for a, b in zip(out.y_layers, ref.y_layers, strict=True):
        assert float(np.abs(a - b).max()) < 1e-12


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c.model_copy(update={"gradients": True}) for c in CASES[1:3]],
                         ids=case_id)
def test_reference_cuda_gradients_match_numpy(case: Case):
    """The backward on the device (CuPy or torch CUDA) equals the NumPy backward to 1e-12."""
    adapter = adapter_or_skip("reference-cuda")
    canonical, inputs = params.generate(case), data.with_upstream(case, data.generate(case))
    out, _ = adapter.run(case, canonical, inputs)
    grads = reference.gradients(case, canonical, inputs)
    assert out.grads is not None
    for k, v in grads.params.items():
        assert float(np.abs(out.grads.params[k] - v).max()) < 1e-12, k
    assert float(np.abs(out.grads.dx - grads.dx).max()) < 1e-12


# On a GPU: the cuDNN buffer layout ----------------------------------------------------------

LAYOUT_CASES = [
    make(cell="lstm", num_layers=2, bidirectional=True),
    make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2),
    make(cell="gru", num_layers=3),
]


@pytest.mark.gpu
@pytest.mark.tensorflow
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=case_id)
def test_params_layout_is_tensorflows_buffer(case: Case):
    """``tf-cudnn-params`` equals what CudnnRNNCanonicalToParamsV2 builds on this GPU."""
    adapter = adapter_or_skip("tf-cudnn")
    import tensorflow as tf

    from harness.cudnn import buffer_size, tf_lists

    if not adapter.uses_tf_packer(tf):  # calling it would abort the process
        # TensorFlow's own bug on this install: an expected failure, not a skip, so that
        # --require-gpu (a skipping gpu test fails) still passes on such a runner
        pytest.xfail("TF's cuDNN bias regions are broken here (harness/adapters/tf_cudnn.py)")

    canonical = params.generate(case)
    weights, biases = tf_lists(get_layout("tf-cudnn").to_native(canonical, case), case)
    attrs = dict(rnn_mode=case.cell, direction="bidirectional" if case.num_directions == 2
                 else "unidirectional", num_proj=case.proj_size)
    sizes = dict(num_layers=case.num_layers, num_units=case.hidden_size,
                 input_size=case.input_size)
    with tf.device("/GPU:0"):
        buf = tf.raw_ops.CudnnRNNCanonicalToParamsV2(
            weights=[tf.constant(w) for w in weights], biases=[tf.constant(b) for b in biases],
            **sizes, **attrs).numpy()
        size = int(tf.raw_ops.CudnnRNNParamsSize(T=tf.float64, S=tf.int32, **sizes,
                                                 **attrs).numpy()[0])
    assert size == buffer_size(case) == buf.size
    expected = get_layout("tf-cudnn-params").to_native(canonical, case)["params"]
    np.testing.assert_array_equal(buf, expected)


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=case_id)
def test_params_layout_is_pytorchs_buffer(case: Case):
    """``tf-cudnn-params`` equals PyTorch's flat cuDNN weight buffer (its parameters are views
    into the buffer cuDNN lays out)."""
    adapter = adapter_or_skip("torch-cudnn")
    import torch

    canonical = params.generate(case)
    case = case.model_copy(update={"dtype": "float64"})
    module = adapter.build(case, get_layout("torch").to_native(canonical, case))
    storage = module._flat_weights[0].untyped_storage()
    buf = torch.empty(0, dtype=torch.float64, device="cuda").set_(storage).cpu().numpy()
    expected = get_layout("tf-cudnn-params").to_native(canonical, case)["params"]
    assert buf.size == expected.size
    np.testing.assert_array_equal(buf, expected)


@pytest.mark.gpu
@pytest.mark.tensorflow
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=case_id)
def test_tf_cudnn_layout_is_what_tensorflow_reads_back(case: Case):
    """CudnnRNNParamsToCanonicalV2 on the ``tf-cudnn-params`` buffer returns exactly the
    ``tf-cudnn`` tensors, with their shapes, in the op's list order."""
    adapter = adapter_or_skip("tf-cudnn")
    import tensorflow as tf

    from harness.cudnn import tf_native_names

    if not adapter.uses_tf_packer(tf):  # as above: TensorFlow's bug, an expected failure
        pytest.xfail("TF's cuDNN bias regions are broken here (harness/adapters/tf_cudnn.py)")
    canonical = params.generate(case)
    native = get_layout("tf-cudnn").to_native(canonical, case)
    weight_keys, bias_keys = tf_native_names(case)
    buf = get_layout("tf-cudnn-params").to_native(canonical, case)["params"]
    with tf.device("/GPU:0"):
        got = tf.raw_ops.CudnnRNNParamsToCanonicalV2(
            num_layers=case.num_layers, num_units=case.hidden_size, input_size=case.input_size,
            params=tf.constant(buf), num_params_weights=len(weight_keys),
            num_params_biases=len(bias_keys), rnn_mode=case.cell,
            direction="bidirectional" if case.num_directions == 2 else "unidirectional",
            num_proj=case.proj_size)
    assert len(got) == len(weight_keys) + len(bias_keys)
    for key, t in zip(weight_keys + bias_keys, got, strict=True):
        np.testing.assert_array_equal(t.numpy(), native[key], err_msg=key)
