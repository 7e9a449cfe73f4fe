"""TensorFlow CPU adapters ``tf-block`` (BlockLSTM), ``tf-block-v2`` (BlockLSTMV2) and
``tf-legacy`` (TF1 LSTMCell / GRUCell) against the float64 reference, and their layouts."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters import get_adapter
from harness.adapters._tf import reverse_within_lengths
from harness.adapters.tf_block import TFBlockLSTM
from harness.layouts import get_layout
from harness.params import Canonical
from harness.spec import Case

tf = pytest.importorskip("tensorflow")
legacy_cells = pytest.importorskip("tf_keras.src.layers.rnn.legacy_cells")

pytestmark = pytest.mark.tensorflow

BLOCK = ("tf-block", "tf-block-v2")
ATOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 3e-2}


make = case_maker(name="tf-test")


def max_errors(out, ref) -> dict[str, float]:
    errs = {k: float(np.abs(out.named()[k] - ref.named()[k]).max()) for k in ref.named()}
    for layer, (a, r) in enumerate(zip(out.y_layers, ref.y_layers, strict=True)):
        errs[f"y_layer{layer}"] = float(np.abs(a - r).max())
    return errs


def check(adapter_name: str, case: Case, canonical: Canonical | None = None,
          inputs: data.Inputs | None = None) -> dict[str, float]:
    """Run the adapter, compare every output (and every layer's y) with the reference."""
    __tracebackhide__ = True
    adapter = get_adapter(adapter_name)
    assert adapter.unavailable_reason() is None, adapter.unavailable_reason()
    assert adapter.not_applicable_reason(case) is None, adapter.not_applicable_reason(case)
    canonical = canonical or params.generate(case)
    inputs = inputs or data.generate(case)
    out, _ = adapter.run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    errs = max_errors(out, ref)
    bad = {k: v for k, v in errs.items() if not v <= ATOL[case.dtype]}
    assert not bad, (f"{adapter_name} on {case.name}: max abs error {bad}, "
                     f"should be <= {ATOL[case.dtype]}")
    if inputs.seq_lengths is not None:  # padded steps are exactly 0
        pad = np.arange(case.seq_len)[None, :] >= inputs.seq_lengths[:, None]
        assert (out.y[pad] == 0).all()
    return errs


def matters(case: Case, canonical: Canonical, inputs: data.Inputs, **change) -> float:
    """How much the reference's y changes when the case changes: proves a feature is exercised."""
    other = case.model_copy(update=change)
    tensors = dict(canonical.tensors)
    if change.get("peepholes") is False:
        tensors = {k: v for k, v in tensors.items() if "/p_" not in k}
    a = reference.run(case, canonical, inputs).y
    b = reference.run(other, Canonical(tensors), inputs).y
    return float(np.abs(a - b).max())


# BlockLSTM / BlockLSTMV2 ---------------------------------------------------------------------

@pytest.mark.parametrize("adapter", BLOCK)
def test_block_forget_bias_peepholes_cell_clip(adapter):
    case = make(forget_bias=1.0, peepholes=True, cell_clip=0.4, initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    for change in (dict(forget_bias=0.0), dict(peepholes=False), dict(cell_clip=None)):
        assert matters(case, canonical, inputs, **change) > 1e-2, change
    check(adapter, case, canonical, inputs)


def growing_cell(case: Case) -> Canonical:
    """Weights that drive i, f, g to 1, so c grows by about 1 per step: 1, 2, ..., T."""
    canonical = params.generate(case)
    t = dict(canonical.tensors)
    for k in t:
        name = k.rsplit("/", 1)[1]
        if name[0] in "WR":
            t[k] = 0.01 * t[k]
        elif name in ("bW_i", "bW_f", "bW_g"):
            t[k] = np.full_like(t[k], 8.0)
    return Canonical(t)


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_default_cell_clip_is_not_applied(adapter):
    # BlockLSTM's cell_clip attr defaults to 3.0: a case without clipping must not be clipped
    case = make(seq_len=6)
    canonical = growing_cell(case)
    inputs = data.generate(case)
    ref = reference.run(case, canonical, inputs)
    assert ref.c_n.max() > 5.0  # far beyond the op's default clip
    check(adapter, case, canonical, inputs)
    # and an explicit clip is honoured
    clipped = make(seq_len=6, cell_clip=2.5)
    errs = check(adapter, clipped, canonical, inputs)
    assert errs["c_n"] < 1e-5
    assert np.isclose(reference.run(clipped, canonical, inputs).c_n.max(), 2.5)


def test_block_v1_forget_bias_default_is_not_applied():
    # the op's forget_bias attr defaults to 1.0; forget_bias 0 with a nonzero c0 must see none
    case = make(initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    assert matters(case, canonical, inputs, forget_bias=1.0) > 1e-2
    check("tf-block", case, canonical, inputs)


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_bidirectional_stack_with_lengths(adapter):
    case = make(num_layers=2, bidirectional=True, seq_lengths=[6, 3, 1], initial_state="random",
                forget_bias=1.0, peepholes=True, cell_clip=1.5, input_size=2, hidden_size=5)
    check(adapter, case)


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_reverse_with_lengths(adapter):
    check(adapter, make(direction="reverse", seq_lengths=[2, 6, 4], initial_state="random"))


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_three_layers_forward(adapter):
    check(adapter, make(num_layers=3, batch=2, initial_state="random", forget_bias=0.5))


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_float16(adapter):
    errs = check(adapter, make(dtype="float16", initial_state="random", peepholes=True,
                               bidirectional=True, seq_lengths=[5, 6, 2]))
    assert max(errs.values()) > 0  # it really ran in half precision


@pytest.mark.parametrize("adapter", BLOCK)
def test_block_not_applicable(adapter):
    a = get_adapter(adapter)
    op = "BlockLSTMV2" if adapter.endswith("v2") else "BlockLSTM"
    for kw, word in ((dict(dtype="float64"), "float32 and float16"),
                     (dict(dtype="bfloat16"), "float32 and float16"),
                     (dict(proj_size=2), "projection"),
                     (dict(cell="gru"), "LSTM"),
                     (dict(gate_clip=1.0), "gate"),
                     (dict(recurrent_activation="hard_sigmoid_keras3"), "sigmoid")):
        reason = a.not_applicable_reason(make(**kw))
        assert reason and f"TF {op} " in reason and word in reason, (kw, reason)


def test_block_native_shapes_are_what_the_op_takes():
    case = make(peepholes=True)
    layout = get_layout("tf-block")
    assert layout.shapes(case) == {"w": (7, 16), "b": (16,), "wci": (4,), "wcf": (4,), "wco": (4,)}
    native = layout.to_native(params.generate(case), case)
    f32 = {k: tf.constant(v, tf.float32) for k, v in native.items()}
    x, s = tf.zeros([6, 3, 3]), tf.zeros([3, 4])
    args = dict(seq_len_max=tf.constant(6, tf.int64), x=x, cs_prev=s, h_prev=s,
                wci=f32["wci"], wcf=f32["wcf"], wco=f32["wco"], b=f32["b"], forget_bias=0.0,
                cell_clip=-1.0, use_peephole=True)
    assert tf.raw_ops.BlockLSTM(w=f32["w"], **args).h.shape == (6, 3, 4)
    with pytest.raises(tf.errors.InvalidArgumentError):  # math orientation [4H, in+H] refused
        tf.raw_ops.BlockLSTM(w=tf.transpose(f32["w"]), **args)


def test_block_v1_and_v2_gate_orders_differ():
    # v1 is i, ci, f, o and v2 is i, f, ci, o: the f and g column blocks swap places
    case = make(initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    v1 = get_layout("tf-block").to_native(canonical, case)
    v2 = get_layout("tf-block-v2").to_native(canonical, case)
    H = case.hidden_size
    swap = np.r_[0:H, 2 * H:3 * H, H:2 * H, 3 * H:4 * H]
    assert np.array_equal(v1["w"][:, swap], v2["w"]) and np.array_equal(v1["b"][swap], v2["b"])
    # v2's tensors fed to the v1 op (trap P3c) are wrong from t = 0
    wrong = TFBlockLSTM()._run(case, v2, inputs)
    ref = reference.run(case, canonical, inputs)
    assert np.abs(wrong.y[:, 0] - ref.y[:, 0]).max() > 0.05


def test_lstm_block_cell_uses_the_tf_block_layout():
    # LSTMBlockCell (behind CudnnCompatibleLSTMCell) is one step of BlockLSTM, same tensors
    case = make(seq_len=1, forget_bias=1.0, peepholes=True, cell_clip=0.3, initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    native = get_layout("tf-block").to_native(canonical, case)
    n = {k: tf.constant(v, tf.float32) for k, v in native.items()}
    out = tf.raw_ops.LSTMBlockCell(
        x=tf.constant(inputs.x[:, 0], tf.float32), cs_prev=tf.constant(inputs.c0[0], tf.float32),
        h_prev=tf.constant(inputs.h0[0], tf.float32), w=n["w"], wci=n["wci"], wcf=n["wcf"],
        wco=n["wco"], b=n["b"], forget_bias=1.0, cell_clip=0.3, use_peephole=True)
    ref = reference.run(case, canonical, inputs)
    assert np.abs(out.h.numpy() - ref.h_n[0]).max() < 1e-6
    assert np.abs(out.cs.numpy() - ref.c_n[0]).max() < 1e-6


def test_block_runtime_notes_name_the_explicit_attributes():
    notes = " ".join(get_layout("tf-block").runtime(make(forget_bias=1.0)))
    assert "forget_bias=1" in notes and "cell_clip=-1" in notes
    case = make(forget_bias=1.0)
    v2 = get_layout("tf-block-v2")
    assert "folded" in " ".join(v2.runtime(case))

    def folds(layout):
        return [pl.where for t in layout.tensors(case) for pl in t.placements
                if pl.fold_forget_bias]

    assert folds(v2) == ["[H:2H]"]  # b's f block, second in i, f, g, o
    assert folds(get_layout("tf-block")) == []


# TF1 LSTMCell / GRUCell ----------------------------------------------------------------------

def test_legacy_lstm_peepholes_projection_clips():
    case = make(peepholes=True, proj_size=2, cell_clip=0.6, proj_clip=0.05, forget_bias=1.0,
                initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    for change in (dict(forget_bias=0.0), dict(peepholes=False), dict(cell_clip=None),
                   dict(proj_clip=None)):
        assert matters(case, canonical, inputs, **change) > 1e-3, change
    check("tf-legacy", case, canonical, inputs)


def test_legacy_lstm_bidirectional_projected_stack_with_lengths():
    # layer 1 reads [forward, backward] projected outputs: kernel rows in_l + P = 2P + P
    case = make(num_layers=2, bidirectional=True, proj_size=2, peepholes=True, forget_bias=1.0,
                seq_lengths=[6, 3, 1], initial_state="random", cell_clip=1.0)
    assert get_layout("tf-legacy").shapes(case)["layer1/backward/kernel"] == (6, 16)
    check("tf-legacy", case)


def test_legacy_lstm_reverse_and_plain():
    check("tf-legacy", make(direction="reverse", seq_lengths=[2, 6, 4], initial_state="random"))
    check("tf-legacy", make(num_layers=3, batch=2))


def test_legacy_gru_reset_before():
    case = make(cell="gru", reset_after=False, initial_state="random")
    canonical, inputs = params.generate(case), data.generate(case)
    assert matters(case, canonical, inputs, reset_after=True) > 1e-2
    check("tf-legacy", case, canonical, inputs)
    check("tf-legacy", make(cell="gru", reset_after=False, num_layers=2, bidirectional=True,
                            seq_lengths=[6, 3, 1], initial_state="random"))


def test_legacy_gru_reset_after_is_not_applicable():
    reason = get_adapter("tf-legacy").not_applicable_reason(make(cell="gru", reset_after=True))
    assert reason and "reset-before only" in reason and "GRUCell" in reason


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_legacy_dtypes(dtype):
    check("tf-legacy", make(dtype=dtype, peepholes=True, initial_state="random", batch=2))
    check("tf-legacy", make(dtype=dtype, cell="gru", reset_after=False, batch=2))


def test_legacy_not_applicable():
    a = get_adapter("tf-legacy")
    assert "gate" in a.not_applicable_reason(make(gate_clip=1.0))
    assert "sigmoid" in a.not_applicable_reason(make(recurrent_activation="hard_sigmoid_tf_keras"))
    assert "input-forget" in a.not_applicable_reason(make(input_forget=True))


def _cell_shapes(cell, in_l: int, prefix: str = "") -> dict[str, tuple[int, ...]]:
    cell.build(tf.TensorShape([None, in_l]))
    return {prefix + v.name.split(":")[0].split("/", 1)[1]: tuple(v.shape) for v in cell.variables}


@pytest.mark.filterwarnings("ignore:`tf.nn.rnn_cell")
def test_legacy_native_names_are_the_cells_variables():
    lstm = make(peepholes=True, proj_size=2)
    real = _cell_shapes(legacy_cells.LSTMCell(4, use_peepholes=True, num_proj=2), 3)
    assert real == get_layout("tf-legacy").shapes(lstm)
    assert set(real) == {"kernel", "bias", "w_i_diag", "w_f_diag", "w_o_diag", "projection/kernel"}

    gru = make(cell="gru", reset_after=False)
    real = _cell_shapes(legacy_cells.GRUCell(4), 3)
    assert real == get_layout("tf-legacy").shapes(gru)

    stack = make(num_layers=2, bidirectional=True, proj_size=3, hidden_size=5)
    real = {}
    for layer in range(2):
        for d in ("forward", "backward"):
            real |= _cell_shapes(legacy_cells.LSTMCell(5, num_proj=3),
                                 stack.layer_input_size(layer), f"layer{layer}/{d}/")
    assert real == get_layout("tf-legacy").shapes(stack)


# Layouts -------------------------------------------------------------------------------------

ROUND_TRIP = [
    ("tf-block", dict(peepholes=True, forget_bias=1.0)),
    ("tf-block", dict(num_layers=2, bidirectional=True)),
    ("tf-block-v2", dict(peepholes=True, forget_bias=1.0, num_layers=2, direction="reverse")),
    ("tf-legacy", dict(peepholes=True, proj_size=2, num_layers=2, bidirectional=True)),
    ("tf-legacy", dict(cell="gru", reset_after=False, num_layers=2, bidirectional=True)),
]


@pytest.mark.parametrize(("layout_name", "kw"), ROUND_TRIP)
def test_round_trip(layout_name, kw):
    case = make(**kw)
    layout = get_layout(layout_name)
    canonical = params.generate(case)
    native = layout.to_native(canonical, case)
    back = layout.from_native(native, case)
    assert set(back.tensors) == set(canonical.tensors)
    folded = case.forget_bias != 0 and layout_name == "tf-block-v2"
    for k, v in canonical.tensors.items():
        kind = k.rsplit("/", 1)[1]
        if kind.startswith("bR_"):
            continue
        if kind.startswith("bW_"):  # summed biases: only bW + bR is stored
            r = k.replace("/bW_", "/bR_")
            got, want = back[k] + back[r], v + canonical[r]
            if folded and kind == "bW_f":
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
            else:
                assert np.array_equal(got, want), k
        else:
            assert np.array_equal(back[k], v), k
    again = layout.to_native(back, case)
    for name, arr in native.items():
        np.testing.assert_allclose(again[name], arr, rtol=0, atol=1e-15 if folded else 0)


def test_scoped_names():
    assert set(get_layout("tf-block").shapes(make())) == {"w", "b"}
    names = set(get_layout("tf-block-v2").shapes(make(num_layers=2, bidirectional=True)))
    assert names == {f"layer{k}/{d}/{n}" for k in (0, 1) for d in ("forward", "backward")
                     for n in ("w", "b")}
    # a single reverse layer is one unidirectional layer: bare names
    assert "candidate/bias" in get_layout("tf-legacy").shapes(make(cell="gru", direction="reverse"))


def test_reverse_within_lengths():
    idx = reverse_within_lengths(np.array([3, 1, 4]), 4)
    assert idx.tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]


def test_importing_harness_does_not_import_tensorflow():
    code = ("import sys, harness.adapters, harness.layouts; "
            "assert 'tensorflow' not in sys.modules and 'tf_keras' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
