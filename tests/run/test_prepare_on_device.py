"""The reference and the noise floor computed on a device (``harness/prepare.py``, a GPU run):
the same generic reference code on torch tensors. Here on torch CPU tensors, standing in for
CUDA ones: the float64 baseline must equal the NumPy one to 1e-12, the noise floor must keep
the NumPy floor's arithmetic (float16 and bfloat16 rounding bit for bit; float32 products in
another summation order, so within a few float32 ulps), and the NumPy ``reference`` adapter
is then judged against that baseline (on small cases only).
"""

from __future__ import annotations

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import compare, prepare
from harness.adapters import get_adapter
from harness.dtypes import FORMATS
from harness.pairs import run_pair

torch = pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.torch

make = case_maker(seed=7, initial_state="random", gradients=True, direction="bidirectional",
                  num_layers=2, seq_lengths=[6, 2, 4])

CASES = {
    "lstm-peepholes-projection": dict(peepholes=True, proj_size=2, cell_clip=0.5),
    "gru-reset-before": dict(cell="gru", reset_after=False),
}


def on_cpu_tensors(monkeypatch):
    monkeypatch.setattr(prepare, "baseline_arrays",
                        lambda device: prepare.ArraysOn(torch, "cpu") if device == "gpu" else None)


def saved(out) -> dict[str, np.ndarray]:
    return out.saved() | {f"y_layers[{k}]": y for k, y in enumerate(out.y_layers)}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", CASES)
def test_reference_and_noise_floor_on_torch_match_numpy(monkeypatch, name: str, dtype: str):
    case = make(name=name, dtype=dtype, **CASES[name])
    numpy_prep = prepare.prepare(case)
    on_cpu_tensors(monkeypatch)
    device_prep = prepare.prepare(case, device="gpu")
    assert numpy_prep.baseline_on == "numpy" and device_prep.baseline_on == "torch cpu"

    want, got = saved(numpy_prep.reference), saved(device_prep.reference)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert float(np.abs(got[k] - v).max()) <= 1e-12, k

    floor_want, floor_got = saved(numpy_prep.noise_floor), saved(device_prep.noise_floor)
    eps = FORMATS[dtype].eps
    for k, v in floor_want.items():
        diff = np.abs(floor_got[k] - v)
        if dtype == "float32":  # products summed in another order: a few ulps apart
            assert (diff <= 8 * eps * np.maximum(1.0, np.abs(v))).all(), (k, float(diff.max()))
        else:  # float32 products of exactly rounded operands, rounded alike: the same values
            assert float(diff.max()) <= 8 * eps * float(np.abs(v).max(initial=1.0)), k


def test_a_cpu_run_computes_the_baseline_with_numpy(monkeypatch):
    on_cpu_tensors(monkeypatch)
    assert prepare.prepare(make(), device="cpu").baseline_on == "numpy"
    assert prepare.prepare(make(), device="all").baseline_on == "numpy"


def test_without_a_gpu_a_gpu_run_computes_the_baseline_with_numpy():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert prepare.baseline_arrays("gpu") is None


def test_the_numpy_reference_is_judged_against_a_device_baseline(monkeypatch):
    on_cpu_tensors(monkeypatch)
    reference = get_adapter("reference")
    small = prepare.prepare(make(dtype="float32"), device="gpu")
    r = run_pair(small, reference)
    assert r.status == compare.PASS, (r.status, r.reason)
    assert "judged against the float64 reference on torch cpu" in r.reason
    assert r.rows is not None and float(r.rows["max_abs"].max()) <= 1e-12

    big = make(cell="gru", batch=64, seq_len=400, hidden_size=128, input_size=64, num_layers=3,
               seq_lengths=None, gradients=False)
    assert reference.beside_a_gpu_baseline(big) is not None  # ~6e10 multiply-adds
    prep = prepare.Prepared(big, small.canonical, small.inputs, small.reference,
                            small.noise_floor, baseline_on="torch cuda")
    r = run_pair(prep, reference)
    assert r.status == compare.NOT_APPLICABLE and "small cases only" in r.reason


def test_in_a_numpy_run_the_reference_is_the_baseline():
    r = run_pair(prepare.prepare(make()), get_adapter("reference"))
    assert r.status == compare.BASELINE
