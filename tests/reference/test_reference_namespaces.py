"""The reference is one code for every array namespace (``harness/reference/functions.py``):
on torch float64 tensors (CPU here; CUDA tensors on a GPU runner, the ``reference-cuda``
adapter) its forward and backward must equal the NumPy reference's to 1e-13.

The NumPy reference is the one checked independently (``test_reference_torch.py``,
``test_reference_gradients.py``); this checks only that the torch path computes the same
equations: a NumPy-only idiom there (``a[:, ::-1]``, a bool × float promoted to float32, a
``transpose(axes)``) fails or drifts far beyond 1e-13.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import reference
from harness.data import Gradients, Inputs, Outputs, generate, with_upstream
from harness.params import Canonical
from harness.params import generate as generate_params
from harness.reference.functions import array_namespace

torch = pytest.importorskip("torch", reason="torch is not installed")
pytestmark = pytest.mark.torch

CASE_DEFAULTS = dict(dtype="float64", seed=11, initial_state="random", gradients=True)
TOL = 1e-13

CASES = {
    "bidirectional-2-layers": dict(direction="bidirectional", num_layers=2),
    "varlen-bidirectional": dict(direction="bidirectional", seq_lengths=[6, 2, 4]),
    "reverse-varlen-gru": dict(cell="gru", direction="reverse", seq_lengths=[3, 6, 1]),
    "peepholes-projection-clips": dict(peepholes=True, proj_size=2, cell_clip=0.5,
                                       proj_clip=0.3, gate_clip=1.5, forget_bias=1.0),
    "input-forget-hard-sigmoid": dict(input_forget=True,
                                      recurrent_activation="hard_sigmoid_tf_keras"),
    "keras3-hard-sigmoid-gru": dict(cell="gru", recurrent_activation="hard_sigmoid_keras3"),
    "gru-reset-after": dict(cell="gru", reset_after=True, num_layers=2),
    "gru-reset-before": dict(cell="gru", reset_after=False, direction="bidirectional"),
}


def on_torch(a: np.ndarray | None) -> object:
    return None if a is None else torch.from_numpy(np.array(a, dtype=np.float64))


def worst(ours: object, theirs: np.ndarray | None) -> float:
    if theirs is None:
        assert ours is None
        return 0.0
    assert isinstance(ours, torch.Tensor) and ours.dtype == torch.float64
    got = ours.numpy()
    assert got.shape == theirs.shape
    return float(np.max(np.abs(got - theirs), initial=0.0))


def errors(out: Outputs, ref: Outputs, grads: Gradients, ref_grads: Gradients) -> dict[str, float]:
    e = {k: worst(getattr(out, k), getattr(ref, k)) for k in ("y", "h_n", "c_n")}
    e |= {k: worst(getattr(grads, k), getattr(ref_grads, k)) for k in ("dx", "dh0", "dc0")}
    e |= {f"d{k}": worst(v, ref_grads.params[k]) for k, v in grads.params.items()}
    return e


@pytest.mark.parametrize("name", CASES)
def test_torch_tensors_give_the_numpy_reference(make_case, name: str) -> None:
    case = make_case(**CASES[name])
    canonical = generate_params(case)
    inputs = with_upstream(case, generate(case))
    ref = reference.run(case, canonical, inputs)
    ref_grads = reference.gradients(case, canonical, inputs)

    t_canonical = Canonical({k: on_torch(v) for k, v in canonical.tensors.items()})
    t_inputs = Inputs(x=on_torch(inputs.x), h0=on_torch(inputs.h0), c0=on_torch(inputs.c0),
                      seq_lengths=inputs.seq_lengths, dy=on_torch(inputs.dy),
                      dh_n=on_torch(inputs.dh_n), dc_n=on_torch(inputs.dc_n))
    out = reference.run(case, t_canonical, t_inputs)
    grads = reference.gradients(case, t_canonical, t_inputs)

    assert sorted(grads.params) == sorted(ref_grads.params)
    bad = {k: v for k, v in errors(out, ref, grads, ref_grads).items() if not v <= TOL}
    assert not bad, f"torch float64 reference differs from NumPy's by more than {TOL}: {bad}"


def test_numpy_keeps_numpy_itself() -> None:
    """NumPy arrays get ``numpy`` itself (no wrapper on the CPU reference's hot path); torch
    tensors the array-API namespace; mixing the two is an error, not a silent copy."""
    assert array_namespace(np.zeros(2), None, 1.0) is np
    xp = array_namespace(torch.zeros(2))
    assert xp is not np and hasattr(xp, "permute_dims")
    with pytest.raises(TypeError):
        array_namespace(np.zeros(2), torch.zeros(2))


@pytest.fixture
def new_tensors_elsewhere():
    """New tensors made without a device go to the meta device: the reference must make every
    tensor on its inputs' device (on a GPU runner: CUDA tensors beside CPU-made ones fail)."""
    torch.set_default_device("meta")
    yield
    torch.set_default_device(None)


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("name", ["varlen-bidirectional", "reverse-varlen-gru",
                                  "peepholes-projection-clips", "gru-reset-before"])
def test_every_tensor_is_made_on_the_inputs_device(make_case, new_tensors_elsewhere, name: str,
                                                   dtype: str) -> None:
    case = make_case(**CASES[name]).model_copy(update={"dtype": dtype})
    canonical, inputs = generate_params(case), with_upstream(case, generate(case))
    t_canonical = Canonical({k: on_torch(v) for k, v in canonical.tensors.items()})
    # no dh_n, dc_n: the backward makes their zeros, where the inputs are
    t_inputs = Inputs(x=on_torch(inputs.x), h0=on_torch(inputs.h0), c0=on_torch(inputs.c0),
                      seq_lengths=inputs.seq_lengths, dy=on_torch(inputs.dy))
    out = reference.run(case, t_canonical, t_inputs, dtype=dtype)
    grads = reference.gradients(case, t_canonical, t_inputs, dtype=dtype)
    assert out.y.device.type == "cpu" and grads.dx.device.type == "cpu"
