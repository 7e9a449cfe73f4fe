"""Backward pass of the Keras adapters (``keras``, ``keras3``, and ``keras-cudnn``'s code path on
CPU) against the float64 reference's backpropagation through time.

Each adapter records its forward under ``tf.GradientTape`` and returns native gradients; the
adapter base maps them to canonical keys through the ``keras`` (``keras-cudnn``) layout, so
these tests check the tape, the conversions of y / h_n / c_n (flips, zeroed padded steps) and
the layout's adjoint together. Errors are relative to each gradient tensor's scale.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters import get_adapter
from harness.data import Gradients
from harness.dtypes import round_to
from harness.spec import Case

# max error / max(1, |reference gradient|); measured on these cases: float64 ~6e-16, float32
# ~2e-7, float16 ~1.5e-3, bfloat16 ~1.5e-2
TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3, "bfloat16": 5e-2}


make = case_maker(name="g", seq_len=5, seed=7, initial_state="random", gradients=True)


def adapter_or_skip(name: str):
    adapter = get_adapter(name)
    reason = adapter.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return adapter


def errors(got: Gradients, ref: Gradients) -> dict[str, float]:
    """Max abs error of every gradient over max(1, the reference gradient's max abs)."""
    ours, theirs = got.named(), ref.named()
    assert set(ours) == set(theirs)
    return {k: float(np.abs(ours[k] - theirs[k]).max() / max(1.0, np.abs(theirs[k]).max()))
            for k in theirs}


def gradients_of(adapter, case: Case) -> tuple[Gradients, Gradients, data.Inputs]:
    assert adapter.not_applicable_reason(case) is None, adapter.not_applicable_reason(case)
    assert adapter.computes_gradients(case)
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    assert out.grads is not None
    return out.grads, reference.gradients(case, canonical, inputs), inputs


CASES = [
    make(cell="lstm", dtype="float64"),
    make(cell="lstm", dtype="float64", direction="reverse", forget_bias=1.0,
         seq_lengths=[5, 2, 1]),
    make(cell="lstm", dtype="float64", bidirectional=True, num_layers=2, seq_lengths=[5, 3, 1]),
    make(cell="lstm", dtype="float32", bidirectional=True, num_layers=2, seq_lengths=[2, 5, 4],
         forget_bias=0.5),
    make(cell="lstm", dtype="float32", num_layers=2, seq_lengths=[4, 5, 1]),
    make(cell="gru", dtype="float64", reset_after=True, bidirectional=True, num_layers=2,
         seq_lengths=[5, 3, 1]),
    make(cell="gru", dtype="float64", reset_after=False, direction="reverse", num_layers=2,
         seq_lengths=[2, 5, 3]),
    make(cell="gru", dtype="float64", reset_after=False, bidirectional=True),
    make(cell="gru", dtype="float32", reset_after=True, seq_lengths=[5, 1, 3]),
    make(cell="gru", dtype="float32", reset_after=False, bidirectional=True, num_layers=2,
         seq_lengths=[4, 5, 2]),
]


def case_id(c: Case) -> str:
    parts = [c.cell, c.dir_mode, f"L{c.num_layers}", c.dtype]
    if c.cell == "gru":
        parts.append(f"ra{c.reset_after}")
    if c.seq_lengths:
        parts.append("var")
    return "-".join(parts)


@pytest.mark.keras
@pytest.mark.parametrize("name", ["keras", "keras3"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradients_match_reference(name: str, case: Case) -> None:
    adapter = adapter_or_skip(name)
    got, ref, inputs = gradients_of(adapter, case)
    errs = errors(got, ref)
    assert max(errs.values()) < TOL[case.dtype], f"{name} {case_id(case)}: {errs}"
    if case.seq_lengths:  # padded input steps reach no output: exactly no gradient there
        padded = np.arange(case.seq_len)[None, :] >= inputs.lengths[:, None]
        assert not got.dx[padded].any()


@pytest.mark.keras
@pytest.mark.parametrize("name, activation", [("keras", "hard_sigmoid_tf_keras"),
                                              ("keras3", "hard_sigmoid_keras3")])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_hard_sigmoid_gradients(name: str, activation: str, cell: str) -> None:
    adapter = adapter_or_skip(name)
    # large weights: pre-activations reach hard_sigmoid's flat parts (zero derivative there)
    case = make(cell=cell, dtype="float64", recurrent_activation=activation,
                weights={"init": "normal", "scale": 2.0}, seq_lengths=[5, 2, 4])
    got, ref, _ = gradients_of(adapter, case)
    errs = errors(got, ref)
    assert max(errs.values()) < TOL["float64"], errs


@pytest.mark.keras
@pytest.mark.parametrize("name", ["keras", "keras3"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_half_precision_gradients_in_that_dtype(name: str, dtype: str, cell: str) -> None:
    adapter = adapter_or_skip(name)
    case = make(cell=cell, dtype=dtype, bidirectional=True, num_layers=2, seq_lengths=[5, 2, 4])
    got, ref, _ = gradients_of(adapter, case)
    errs = errors(got, ref)
    assert max(errs.values()) < TOL[dtype], errs
    for v in got.named().values():  # the tape ran in the case dtype, not in float32
        np.testing.assert_array_equal(v, round_to(v, dtype))


@pytest.mark.keras
@pytest.mark.parametrize("name", ["keras", "keras3"])
def test_forward_only_without_gradients(name: str) -> None:
    adapter = adapter_or_skip(name)
    assert adapter.capabilities.gradients
    case = make(cell="lstm", gradients=False)
    assert not adapter.computes_gradients(case)
    out, _ = adapter.run(case, params.generate(case), data.generate(case))
    assert out.grads is None


# keras-cudnn's gradient code path on CPU ------------------------------------------------------

class FakeCuDNN:
    """A CuDNNLSTM / CuDNNGRU stand-in in differentiable TF ops, for the ``keras-cudnn`` adapter
    without a GPU: the same variables (``kernel`` [in, G*H], ``recurrent_kernel`` [H, G*H],
    ``bias`` [2*G*H], stored gates i f c o / z r h) read with cuDNN's semantics (docs/layouts.md,
    keras-cudnn):
    gate j's input matrix is the C-order reshape of kernel's column slice to [H, in], its
    recurrent matrix is the slice itself (h @ slice.T), biases input then recurrent; GRU
    reset-after. ``go_backwards`` returns y in reading order, as tf_keras does."""

    def __init__(self, tf: Any, case: Case, layer: int, d: int) -> None:
        self.tf, self.lstm, self.backwards = tf, case.cell == "lstm", d == 1
        H, n_in, G = case.hidden_size, case.layer_input_size(layer), len(case.gates)
        self.H, self.n_in, self.G = H, n_in, G
        self.weights = [tf.Variable(tf.zeros(s, case.dtype), name=n) for n, s in
                        (("kernel", (n_in, G * H)), ("recurrent_kernel", (H, G * H)),
                         ("bias", (2 * G * H,)))]

    def set_weights(self, values: list[np.ndarray]) -> None:
        for v, a in zip(self.weights, values, strict=True):
            v.assign(a)

    def __call__(self, x: Any, initial_state: list[Any]) -> list[Any]:
        tf, H = self.tf, self.H
        kernel, rec, bias = self.weights
        W = [tf.reshape(kernel[:, j * H:(j + 1) * H], (H, self.n_in)) for j in range(self.G)]
        R = [rec[:, j * H:(j + 1) * H] for j in range(self.G)]
        bW = [bias[j * H:(j + 1) * H] for j in range(self.G)]
        bR = [bias[(self.G + j) * H:(self.G + j + 1) * H] for j in range(self.G)]

        def lin(v: Any, m: Any) -> Any:
            return tf.matmul(v, m, transpose_b=True)

        h, c = initial_state[0], initial_state[1] if self.lstm else None
        steps = range(x.shape[1])
        ys = []
        for t in reversed(steps) if self.backwards else steps:
            xt = x[:, t]
            if self.lstm:
                i, f, g, o = (lin(xt, W[j]) + bW[j] + lin(h, R[j]) + bR[j] for j in range(4))
                c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
                h = tf.sigmoid(o) * tf.tanh(c)
            else:  # stored z r h
                z = tf.sigmoid(lin(xt, W[0]) + bW[0] + lin(h, R[0]) + bR[0])
                r = tf.sigmoid(lin(xt, W[1]) + bW[1] + lin(h, R[1]) + bR[1])
                n = tf.tanh(lin(xt, W[2]) + bW[2] + r * (lin(h, R[2]) + bR[2]))
                h = (1 - z) * n + z * h
            ys.append(h)
        return [tf.stack(ys, axis=1), h] + ([c] if self.lstm else [])


@pytest.mark.keras
@pytest.mark.parametrize("case", [
    make(cell="lstm", dtype="float64", bidirectional=True, num_layers=2),
    make(cell="lstm", dtype="float32"),
    make(cell="gru", dtype="float64", reset_after=True, bidirectional=True, num_layers=2),
], ids=case_id)
def test_keras_cudnn_gradient_path_on_cpu(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """The ``keras-cudnn`` adapter's tape, state and name bookkeeping, with the CuDNN layers
    replaced by :class:`FakeCuDNN` (a GPU run checks the real layers: test_gpu_adapters)."""
    import harness.adapters.keras_cudnn as kc

    adapter_or_skip("keras")  # TensorFlow and tf_keras importable
    import tensorflow as tf

    monkeypatch.setattr(kc, "build_layer", lambda c, layer, d: FakeCuDNN(tf, c, layer, d))
    adapter = get_adapter("keras-cudnn")
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)  # "/GPU:0" soft-placed on the CPU
    ref_out = reference.run(case, canonical, inputs)
    assert np.abs(out.y - ref_out.y).max() < TOL[case.dtype]  # the fake is a faithful forward
    errs = errors(out.grads, reference.gradients(case, canonical, inputs))
    assert max(errs.values()) < TOL[case.dtype], errs
