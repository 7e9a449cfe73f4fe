"""Backward pass of the TensorFlow adapters ``tf-legacy`` (TF1 LSTMCell / GRUCell), ``tf-block``
(BlockLSTM, gradient op BlockLSTMGrad), ``tf-block-v2`` (BlockLSTMV2, gradient op
BlockLSTMGradV2) and ``tf-cudnn`` (GPU only) against the float64 reference's backpropagation
through time (``harness.reference.gradients``).

Each adapter records its forward (layers, reversal within lengths, zeroed padded steps: all in
TF ops) under ``tf.GradientTape`` and returns native gradients; the adapter base maps them to
canonical keys through the layout, so these tests check the tape, the direction handling and
the layout's adjoint together. Errors are max abs errors over the reference gradient's scale
(the largest |gradient| of the case).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters import get_adapter
from harness.adapters.base import Adapter
from harness.adapters.tf_block import TFBlockLSTMV2
from harness.cudnn import tf_params
from harness.data import Gradients
from harness.layouts import get_layout
from harness.params import Canonical
from harness.spec import Case

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tf_keras.src.layers.rnn.legacy_cells")

pytestmark = pytest.mark.tensorflow

# relative to the case's gradient scale; measured at most 3e-16 (float64), 3e-7 (float32)
TOL = {"float64": 1e-12, "float32": 1e-5}
BLOCK = ("tf-block", "tf-block-v2")


make = case_maker(name="tf-grad", seq_len=5, seed=5, initial_state="random", gradients=True)


def scale(g: Gradients) -> float:
    return max(float(np.abs(v).max()) for v in g.named().values())


def errors(got: Gradients, ref: Gradients) -> dict[str, float]:
    """Max abs error of every gradient (``dx``, ``dh0``, ``dc0``, ``grad/<key>``)."""
    ours, theirs = got.named(), ref.named()
    assert set(ours) == set(theirs), set(ours) ^ set(theirs)
    return {k: float(np.abs(ours[k] - theirs[k]).max()) for k in theirs}


def run(adapter: str | Adapter, case: Case, canonical: Canonical | None = None):
    adapter = get_adapter(adapter) if isinstance(adapter, str) else adapter
    assert adapter.unavailable_reason() is None, adapter.unavailable_reason()
    assert adapter.not_applicable_reason(case) is None, adapter.not_applicable_reason(case)
    canonical = canonical or params.generate(case)
    inputs = data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    return out, canonical, inputs


def check(adapter: str | Adapter, case: Case, canonical: Canonical | None = None
          ) -> dict[str, float]:
    """Run the adapter's backward pass and compare every gradient with the reference's; also
    its forward outputs, and that padded steps get no gradient. Returns the errors / scale."""
    __tracebackhide__ = True
    out, canonical, inputs = run(adapter, case, canonical)
    assert out.grads is not None, "no gradients for a gradient case"
    ref = reference.gradients(case, canonical, inputs)
    s = scale(ref)
    rel = {k: v / s for k, v in errors(out.grads, ref).items()}
    bad = {k: f"{v:.2e}" for k, v in rel.items() if not v <= TOL[case.dtype]}
    assert not bad, (f"{case.name}: gradient errors / scale {s:.3g} {bad}, "
                     f"should be <= {TOL[case.dtype]}")
    fwd = reference.run(case, canonical, inputs)
    assert np.abs(out.y - fwd.y).max() <= 10 * TOL[case.dtype]
    if inputs.seq_lengths is not None:  # padded steps of x feed nothing that is kept
        pad = np.arange(case.seq_len)[None, :] >= inputs.seq_lengths[:, None]
        assert (out.grads.dx[pad] == 0).all()
    return rel


def matters(case: Case, **change: Any) -> float:
    """How much the reference's dx changes with the case: proves a feature is exercised."""
    canonical, inputs = params.generate(case), data.generate(case)
    other = case.model_copy(update=change)
    tensors = dict(canonical.tensors)
    if change.get("peepholes") is False:
        tensors = {k: v for k, v in tensors.items() if "/p_" not in k}
    a = reference.gradients(case, canonical, inputs).dx
    b = reference.gradients(other, Canonical(tensors), inputs).dx
    return float(np.abs(a - b).max())


# TF1 LSTMCell / GRUCell ----------------------------------------------------------------------

LEGACY_FEATURES = make(dtype="float64", peepholes=True, cell_clip=0.5, forget_bias=1.0,
                       proj_size=2, proj_clip=0.15)


def test_legacy_lstm_every_feature_float64():
    for change in (dict(peepholes=False), dict(cell_clip=None), dict(forget_bias=0.0),
                   dict(proj_clip=None)):
        assert matters(LEGACY_FEATURES, **change) > 1e-3, change
    check("tf-legacy", LEGACY_FEATURES)


@pytest.mark.parametrize("case", [
    make(dtype="float64", num_layers=2, bidirectional=True, seq_lengths=[5, 3, 1],
         peepholes=True, proj_size=2, forget_bias=0.5),
    make(dtype="float64", direction="reverse", seq_lengths=[2, 5, 4], cell_clip=0.8),
    make(dtype="float32", num_layers=2, bidirectional=True, seq_lengths=[4, 2, 1],
         peepholes=True, cell_clip=0.7, proj_size=3, proj_clip=0.3, hidden_size=5),
], ids=["bidir-stack-lengths", "reverse-lengths", "float32-bidir-stack"])
def test_legacy_lstm(case):
    check("tf-legacy", case)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_legacy_gru_reset_before(dtype):
    check("tf-legacy", make(cell="gru", reset_after=False, dtype=dtype, num_layers=2,
                            bidirectional=True, seq_lengths=[5, 3, 1]))


def test_legacy_returns_every_cell_variable():
    # the native gradients are keyed by the cells' own variable names, through the layout
    case = LEGACY_FEATURES.model_copy(update={"num_layers": 2})
    out, _, _ = run("tf-legacy", case)
    assert set(out.grads.params) == set(params.expected_shapes(case))


# BlockLSTM / BlockLSTMV2 ---------------------------------------------------------------------

@pytest.mark.parametrize("adapter", BLOCK)
@pytest.mark.parametrize("case", [
    make(forget_bias=1.0, peepholes=True),
    make(num_layers=2, bidirectional=True, seq_lengths=[5, 3, 1], peepholes=True,
         forget_bias=0.5, input_size=2, hidden_size=5),
    make(direction="reverse", seq_lengths=[2, 5, 4]),
    # every sequence shorter than seq_len: the op's seq_len_max < T
    make(num_layers=2, seq_lengths=[3, 1, 2], batch=3, seq_len=6),
], ids=["peepholes-forget-bias", "bidir-stack-lengths", "reverse-lengths", "short-batch"])
def test_block(adapter, case):
    check(adapter, case)


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_cell_clip_gradients_are_not_compared(adapter):
    # BlockLSTMGrad[V2] has no cell_clip attribute: it differentiates the clip as the identity
    a = get_adapter(adapter)
    case = make(cell_clip=0.5)
    assert a.not_applicable_reason(case) is None  # the forward pass runs and is compared
    assert not a.computes_gradients(case)
    note = a.gradient_note(case)
    assert note and "cell_clip" in note and "BlockLSTMGrad" in note, note
    out, _, _ = run(a, case)
    assert out.grads is None
    assert a.gradient_note(case.model_copy(update={"cell_clip": None})) is None


def forced(cls: type, **attrs: Any) -> Adapter:
    """An instance of adapter class ``cls`` that computes gradients even with a cell_clip
    (to show the fact behind its note), with class attributes ``attrs`` changed."""
    return type(f"Forced{cls.__name__}", (cls,), {
        "computes_gradients": lambda self, case: case.gradients, **attrs})()


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_grad_ops_treat_cell_clip_as_identity(adapter):
    clipless = forced(type(get_adapter(adapter)))
    # a clip never reached: the true gradient
    check(clipless, make(cell_clip=50.0, peepholes=True))
    # a clip reached: the clip's zero derivative is missing (if this starts passing, TF
    # learned to differentiate cell_clip: drop TFBlockLSTM.computes_gradients' exclusion)
    case = make(cell_clip=0.5, peepholes=True)
    assert matters(case, cell_clip=None) > 0.1
    out, canonical, inputs = run(clipless, case)
    ref = reference.gradients(case, canonical, inputs)
    assert max(errors(out.grads, ref).values()) > 0.1 * scale(ref)


def test_block_v2_registered_gradient_is_v1s():
    # TF registers BlockLSTM's gradient function (op BlockLSTMGrad, gates i, ci, f, o) for
    # BlockLSTMV2 (gates i, f, ci, o): what a tape over BlockLSTMV2 gives is wrong. The adapter
    # attaches BlockLSTMGradV2 itself; if this starts failing, TF fixed the registration.
    registered = forced(TFBlockLSTMV2, gradient_op=None)
    case = make(forget_bias=1.0, peepholes=True)
    out, canonical, inputs = run(registered, case)
    ref = reference.gradients(case, canonical, inputs)
    errs = errors(out.grads, ref)
    assert errs["dx"] > 0.1 * scale(ref)
    assert errs["grad/layer0/forward/bW_f"] > 0.1 * scale(ref)


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_float16(adapter):
    # BlockLSTMGrad[V2] have half kernels too
    case = make(dtype="float16", peepholes=True, bidirectional=True, seq_lengths=[5, 2, 4])
    out, canonical, inputs = run(adapter, case)
    ref = reference.gradients(case, canonical, inputs)
    worst = max(errors(out.grads, ref).values())
    assert 0 < worst < 1e-2 * scale(ref)  # it really ran in half precision, and agrees


# tf-cudnn: the buffer's gradient read back per tensor ----------------------------------------

@pytest.mark.parametrize("case", [
    make(num_layers=2, bidirectional=True, proj_size=2),
    make(cell="gru", num_layers=2, seq_lengths=[5, 3, 1]),
], ids=["lstm-bidir-proj", "gru-stack"])
def test_tf_params_adjoint(case):
    from harness.adapters.tf_cudnn import tf_params_adjoint

    native = get_layout("tf-cudnn").to_native(params.generate(case), case)
    buf = tf_params(native, case)
    # packing copies every tensor into its own region: the adjoint reads them back ...
    back = tf_params_adjoint(buf, case)
    assert set(back) == set(native)
    for k, v in native.items():
        assert np.array_equal(back[k], v), k
    # ... and <pack(v), g> = <v, adjoint(g)> for any buffer gradient g
    g = np.random.default_rng(0).normal(size=buf.shape)
    adj = tf_params_adjoint(g, case)
    assert np.isclose(buf @ g, sum(float(np.sum(native[k] * adj[k])) for k in native))


def test_tf_cudnn_declares_gradients():
    a = get_adapter("tf-cudnn")
    assert a.capabilities.gradients
    assert a.gradient_note(make(cell="gru")) is None


@pytest.mark.gpu
@pytest.mark.parametrize("case", [
    make(dtype="float64", num_layers=2, bidirectional=True, seq_lengths=[5, 3, 1]),
    make(dtype="float64", proj_size=2),
    make(dtype="float64", cell="gru", num_layers=2, bidirectional=True, seq_lengths=[5, 3, 1]),
    make(dtype="float32", num_layers=2, bidirectional=True, seq_lengths=[5, 3, 1]),
], ids=["lstm-bidir-lengths", "lstm-proj", "gru-bidir-lengths", "float32"])
def test_tf_cudnn_gradients(case):
    reason = get_adapter("tf-cudnn").unavailable_reason()
    if reason:
        pytest.skip(f"tf-cudnn: {reason}")
    check("tf-cudnn", case)
