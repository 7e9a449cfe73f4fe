"""cuDNN weight packing, checked on CPU: layouts ``tf-cudnn``, ``tf-cudnn-params``,
``keras-cudnn`` and what the ``tf-cudnn`` / ``keras-cudnn`` adapters hand to cuDNN.

No GPU is needed. The buffer the adapters hand to cuDNN is built on CPU (``harness.cudnn``),
decoded by an independent NumPy emulation of cuDNN's documented weight layout
(``tests/support/cudnn_emulation.py``), run through the float64 reference and compared with the
reference on the original canonical parameters. The adapters themselves also run end to end
with TF's cuDNN raw ops replaced by that emulation (tf_keras's own CuDNNLSTM code included).
Planted layout mistakes must fail these checks.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support import cudnn_emulation as emu
from support.case_factory import case_maker

from harness import cudnn, data, params, reference
from harness.adapters.keras_cudnn import KerasCuDNN
from harness.adapters.tf_cudnn import TFCuDNN
from harness.layouts import get_layout
from harness.layouts.base import Layout, fused, grid
from harness.params import Canonical
from harness.spec import Case

TF_CUDNN = get_layout("tf-cudnn")
TF_CUDNN_PARAMS = get_layout("tf-cudnn-params")
KERAS_CUDNN = get_layout("keras-cudnn")


# I != H and neither is 1: a reshape, a transpose and a copy of a block all differ
make = case_maker(seed=5, initial_state="random", dtype="float64")


TF_CASES = [
    make(cell="lstm"),
    make(cell="lstm", num_layers=2, bidirectional=True, forget_bias=0.5),
    make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2, seq_lengths=[6, 3, 1]),
    make(cell="lstm", num_layers=3, proj_size=3, input_size=5, seed=9),
    make(cell="gru", seq_lengths=[2, 6, 4]),
    make(cell="gru", num_layers=2, bidirectional=True, seq_lengths=[6, 3, 1]),
]
KERAS_CASES = [
    make(cell="lstm"),
    make(cell="lstm", num_layers=2, bidirectional=True, forget_bias=-0.5),
    make(cell="gru"),
    make(cell="gru", num_layers=2, bidirectional=True, input_size=1, seed=2),
]


def case_id(c: Case) -> str:
    bits = [c.cell, f"L{c.num_layers}", c.dir_mode[:5]]
    bits += [f"p{c.proj_size}"] * bool(c.proj_size) + ["lengths"] * bool(c.seq_lengths)
    bits += [f"fb{c.forget_bias:g}"] * bool(c.forget_bias) + [f"I{c.input_size}"]
    return "-".join(bits)


def max_error(out, ref) -> float:
    return max(float(np.abs(v - ref.named()[k]).max()) for k, v in out.named().items())


def as_cudnn_runs(case: Case) -> Case:
    """The case as cuDNN runs it: no runtime forget bias (the layouts store it in bW_f)."""
    return case.model_copy(update={"forget_bias": 0.0})


# Layouts ---------------------------------------------------------------------------------------

def assert_round_trip(layout: Layout, case: Case) -> None:
    """canonical -> native -> canonical is exact; a folded forget bias comes back as
    (bW_f + forget_bias) - forget_bias, exact to one rounding."""
    canonical = params.generate(case)
    back = layout.from_native(layout.to_native(canonical, case), case)
    assert set(back.tensors) == set(canonical.tensors)
    for k, v in canonical.tensors.items():
        if case.forget_bias and k.endswith("/bW_f"):
            np.testing.assert_allclose(back[k], v, rtol=0, atol=1e-15, err_msg=k)
        else:
            np.testing.assert_array_equal(back[k], v, err_msg=k)

@pytest.mark.parametrize("case", TF_CASES + KERAS_CASES[1:2], ids=case_id)
@pytest.mark.parametrize("layout", [TF_CUDNN, TF_CUDNN_PARAMS], ids=lambda x: x.name)
def test_tf_layouts_round_trip(layout: Layout, case: Case):
    assert_round_trip(layout, case)


@pytest.mark.parametrize("case", KERAS_CASES, ids=case_id)
def test_keras_layout_round_trip(case: Case):
    assert_round_trip(KERAS_CUDNN, case)


def test_tf_cudnn_names_and_shapes():
    case = make(cell="lstm", num_layers=2, bidirectional=True, proj_size=2)
    shapes = TF_CUDNN.shapes(case)
    assert shapes["layer0/forward/weights/0"] == (4, 3)  # W_i [H, I]
    assert shapes["layer1/backward/weights/0"] == (4, 4)  # W_i [H, P*D]
    assert shapes["layer0/forward/weights/4"] == (4, 2)  # R_i [H, P]
    assert shapes["layer1/backward/weights/8"] == (2, 4)  # projection [P, H]
    assert shapes["layer1/backward/biases/7"] == (4,)
    assert len(shapes) == 4 * (9 + 8)
    single = TF_CUDNN.shapes(make(cell="gru"))
    assert list(single) == [f"weights/{k}" for k in range(6)] + [f"biases/{k}" for k in range(6)]
    # cuDNN's IDs: weights/1 is the GRU update gate z, weights/2 the candidate n
    rows = {r["tensor"]: r["holds"] for r in TF_CUDNN.mapping(make(cell="gru"))}
    assert rows["weights/1"].startswith("W_z") and rows["biases/5"].startswith("bR_n")


def test_keras_mapping_table_says_reshape_copy():
    """The mapping table shows what cuDNN does with each slice: kernel = reshaped W_g,
    recurrent_kernel = R_g as is, bias = bW then bR."""
    rows = KERAS_CUDNN.mapping(make(cell="gru", num_layers=2))
    by = {(r["tensor"], r["slice"]): r["holds"] for r in rows
          if r["tensor"].startswith("layer0/forward/")}
    kernel = by[("layer0/forward/kernel", "[:, 0:H]")]
    assert kernel.startswith("W_z") and "reshape" in kernel and "not a transpose" in kernel
    recurrent = by[("layer0/forward/recurrent_kernel", "[:, H:2H]")]
    assert recurrent.startswith("R_r") and not any(w in recurrent for w in ("transpos", "reshape"))
    assert by[("layer0/forward/bias", "[3H:4H]")].startswith("bR_z")
    assert KERAS_CUDNN.shapes(make(cell="lstm")) == {
        "kernel": (3, 16), "recurrent_kernel": (4, 16), "bias": (32,)}


def test_keras_layout_matches_framework_variables():
    """Names and shapes of the variables tf_keras's CuDNNLSTM / CuDNNGRU create (they build on
    CPU; only calling them needs cuDNN)."""
    pytest.importorskip("tf_keras")
    from harness.adapters.keras_cudnn import build_layer, short_name

    for case in KERAS_CASES:
        created = {}
        for layer, d in cudnn.pseudo_layers(case):
            rnn = build_layer(case, layer, d)
            assert [short_name(v) for v in rnn.weights] == list(cudnn.KERAS_NAMES)
            created.update({cudnn.scoped(case, layer, d, short_name(v)): tuple(v.shape)
                            for v in rnn.weights})
        assert created == KERAS_CUDNN.shapes(case), case_id(case)


# The tf-cudnn buffer -----------------------------------------------------------------------------

@pytest.mark.parametrize("case", TF_CASES, ids=case_id)
def test_tf_buffer_descriptions_agree(case: Case):
    """Three independent descriptions of the buffer CudnnRNNCanonicalToParamsV2 makes agree:
    layout ``tf-cudnn-params``, ``harness.cudnn.tf_params`` and the emulated TF op."""
    canonical = params.generate(case)
    native = TF_CUDNN.to_native(canonical, case)
    weights, biases = cudnn.tf_lists(native, case)
    emulated = emu.canonical_to_params(weights, biases, emu.dims_of(case))
    np.testing.assert_array_equal(cudnn.tf_params(native, case), emulated)
    np.testing.assert_array_equal(TF_CUDNN_PARAMS.to_native(canonical, case)["params"], emulated)
    assert cudnn.buffer_size(case) == emu.buffer_size(emu.dims_of(case)) == emulated.size


def check_tf_buffer(case: Case, layout: Layout = TF_CUDNN) -> float:
    """Decode the buffer tf-cudnn hands to cuDNN (through ``layout``), run it, compare."""
    canonical, inputs = params.generate(case), data.generate(case)
    buf = cudnn.tf_params(layout.to_native(canonical, case), case)
    decoded = emu.decode(buf, emu.dims_of(case))
    err = max_error(reference.run(as_cudnn_runs(case), decoded, inputs),
                    reference.run(case, canonical, inputs))
    assert err < 1e-12, f"{layout.name}: decoded buffer diverges by {err:.2g}"
    return err


@pytest.mark.parametrize("case", TF_CASES, ids=case_id)
def test_tf_buffer_decodes_to_the_reference(case: Case):
    check_tf_buffer(case)


# The keras-cudnn buffers -------------------------------------------------------------------------

def check_keras_buffers(case: Case, layout: Layout = KERAS_CUDNN) -> float:
    """Decode the buffers the keras-cudnn layers hand to cuDNN, run them, compare."""
    canonical, inputs = params.generate(case), data.generate(case)
    buffers = cudnn.keras_buffers(layout.to_native(canonical, case), case)
    decoded = {}
    for (layer, d), buf in buffers.items():
        one = emu.Dims(case.cell, case.layer_input_size(layer), case.hidden_size)
        for k, v in emu.decode(buf, one).tensors.items():
            decoded[k.replace("layer0/forward/", f"layer{layer}/{params.DIRECTION_NAMES[d]}/")] = v
    err = max_error(reference.run(as_cudnn_runs(case), Canonical(decoded), inputs),
                    reference.run(case, canonical, inputs))
    assert err < 1e-12, f"{layout.name}: decoded buffers diverge by {err:.2g}"
    return err


@pytest.mark.parametrize("case", KERAS_CASES, ids=case_id)
def test_keras_buffers_decode_to_the_reference(case: Case):
    check_keras_buffers(case)


@pytest.mark.parametrize("case", KERAS_CASES, ids=case_id)
def test_keras_params_is_what_tf_keras_builds(case: Case, monkeypatch):
    """``harness.cudnn.keras_params`` equals the buffer tf_keras's own CuDNNLSTM/CuDNNGRU code
    hands to ``CudnnRNNV3`` (captured by a fake op), for the weights the adapter loads."""
    pytest.importorskip("tf_keras")
    import tensorflow as tf

    from harness.adapters.keras_cudnn import build_layer

    rec = emu.patch_tf(monkeypatch)
    native = KERAS_CUDNN.to_native(params.generate(case), case)
    for layer, d in cudnn.pseudo_layers(case):
        rnn = build_layer(case, layer, d)
        weights = cudnn.keras_weights(native, case, layer, d)
        rnn.set_weights(weights)
        rnn(tf.zeros((case.batch, case.seq_len, case.layer_input_size(layer)), tf.float64))
        expected = cudnn.keras_params(*weights, case.cell)
        np.testing.assert_array_equal(rec.rnn[-1]["params"], expected)


# The adapters, end to end with cuDNN emulated -------------------------------------------------

@pytest.mark.parametrize("case", TF_CASES + [make(cell="lstm", dtype="float32", proj_size=3,
                                                  num_layers=2, seq_lengths=[1, 6, 5])],
                         ids=case_id)
def test_tf_cudnn_adapter_with_emulated_cudnn(case: Case, monkeypatch):
    pytest.importorskip("tensorflow")
    rec = emu.patch_tf(monkeypatch)
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = TFCuDNN().run(case, canonical, inputs)
    err = max_error(out, reference.run(case, canonical, inputs))
    assert err < (1e-12 if case.dtype == "float64" else 1e-6), err
    (call,) = rec.rnn
    assert len(rec.canonical_to_params) == 1  # TF packed the buffer (the probe passed)
    assert call["time_major"] and call["dims"] == emu.dims_of(case)
    np.testing.assert_array_equal(call["lengths"], inputs.lengths)


def test_tf_cudnn_adapter_packs_in_numpy_when_tf_regions_are_broken(monkeypatch):
    """With TF's bias regions broken (module doc of harness/adapters/tf_cudnn.py), the adapter
    must not call CudnnRNNCanonicalToParamsV2 (it would abort) and packs in NumPy instead."""
    pytest.importorskip("tensorflow")
    rec = emu.patch_tf(monkeypatch, broken_bias_regions=True)
    case = TF_CASES[2]
    canonical, inputs = params.generate(case), data.generate(case)
    adapter = TFCuDNN()
    with pytest.warns(RuntimeWarning, match="packing the buffer in NumPy"):
        out, _ = adapter.run(case, canonical, inputs)
    assert not rec.canonical_to_params and adapter._tf_packer is False
    assert max_error(out, reference.run(case, canonical, inputs)) < 1e-12


@pytest.mark.parametrize("case", KERAS_CASES + [make(cell="gru", dtype="float32", num_layers=2)],
                         ids=case_id)
def test_keras_cudnn_adapter_with_emulated_cudnn(case: Case, monkeypatch):
    pytest.importorskip("tf_keras")
    rec = emu.patch_tf(monkeypatch)
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = KerasCuDNN().run(case, canonical, inputs)
    ref = reference.run(case, canonical, inputs)
    err = max_error(out, ref)
    assert err < (1e-12 if case.dtype == "float64" else 1e-6), err
    assert len(rec.rnn) == case.num_layers * case.num_directions
    assert len(out.y_layers) == case.num_layers
    for a, b in zip(out.y_layers, ref.y_layers, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


# Planted mistakes must fail -------------------------------------------------------------------

def keras_variant(kernel: str = "reshape", recurrent: str = "copy", gru_order: str = "zrn"
                  ) -> Layout:
    def describe(case: Case, layer: int, d: int):
        order = "ifgo" if case.cell == "lstm" else gru_order
        return [
            fused(case, layer, d, "kernel", "W", order, transform=kernel),
            fused(case, layer, d, "recurrent_kernel", "R", order, transform=recurrent),
            grid(case, layer, d, "bias", [[f"bW_{g}" for g in order] + [f"bR_{g}" for g in order]],
                 fold_forget_bias=True),
        ]
    return replace(KERAS_CUDNN, name="keras-cudnn-planted", describe=describe)


PLANTED_KERAS = [
    # the Keras-orientation reading of a CuDNN kernel (seed 001)
    (dict(kernel="transpose"), "lstm"), (dict(kernel="transpose"), "gru"),
    # h @ slice instead of cuDNN's R_g h
    (dict(recurrent="transpose"), "lstm"), (dict(recurrent="transpose"), "gru"),
    # CuDNNGRU's stored z, r, h taken for cuDNN's r, z, h
    (dict(gru_order="rzn"), "gru"),
]


@pytest.mark.parametrize(("mistake", "cell"), PLANTED_KERAS,
                         ids=[f"{next(iter(m.items()))[0]}-{c}" for m, c in PLANTED_KERAS])
def test_planted_keras_mistakes_fail(mistake: dict, cell: str):
    case = make(cell=cell)
    with pytest.raises(AssertionError, match="diverge"):
        check_keras_buffers(case, keras_variant(**mistake))
    check_keras_buffers(case, keras_variant())  # the unplanted variant passes


def tf_variant(swap: tuple[str, str]) -> Layout:
    """tf-cudnn with two canonical blocks exchanged (a wrong gate or W/R order)."""
    a, b = swap

    def describe(case: Case, layer: int, d: int):
        out = []
        for t in TF_CUDNN.describe(case, layer, d):
            pls = tuple(p._replace(sources=tuple(
                s.replace(f"/{a}", f"/{b}") if s.endswith(f"/{a}") else
                s.replace(f"/{b}", f"/{a}") if s.endswith(f"/{b}") else s for s in p.sources))
                for p in t.placements)
            out.append(replace(t, placements=pls))
        return out
    return replace(TF_CUDNN, name="tf-cudnn-planted", describe=describe)


@pytest.mark.parametrize("swap", [("W_f", "W_g"), ("bR_o", "bR_i"), ("R_r", "R_z")],
                         ids=lambda s: "<->".join(s))
def test_planted_tf_mistakes_fail(swap: tuple[str, str]):
    cell = "gru" if swap[0].endswith(("r", "z", "n")) else "lstm"
    case = make(cell=cell, num_layers=2, bidirectional=True, input_size=4)
    with pytest.raises(AssertionError, match="diverges"):
        check_tf_buffer(case, tf_variant(swap))


def test_planted_adapter_list_order_fails(monkeypatch):
    """If the adapter handed CudnnRNNCanonicalToParamsV2 its lists direction-major instead of
    pseudo-layer-major, the emulated run diverges (I = 2H: every block has the right size, so
    TF's size checks would not catch it)."""
    pytest.importorskip("tensorflow")
    case = make(cell="lstm", num_layers=2, bidirectional=True, input_size=8)
    emu.patch_tf(monkeypatch)

    def wrong_lists(native, c):
        weights, biases = cudnn.tf_lists(native, c)
        n, m = 8, 8  # per pseudo-layer; reorder (l0f, l0b, l1f, l1b) -> (l0f, l1f, l0b, l1b)
        order = [0, 2, 1, 3]
        return ([w for p in order for w in weights[p * n:(p + 1) * n]],
                [b for p in order for b in biases[p * m:(p + 1) * m]])

    monkeypatch.setattr("harness.adapters.tf_cudnn.tf_lists", wrong_lists)
    canonical, inputs = params.generate(case), data.generate(case)
    out, _ = TFCuDNN().run(case, canonical, inputs)
    assert max_error(out, reference.run(case, canonical, inputs)) > 1e-2


# Capabilities -------------------------------------------------------------------------------------

def test_not_applicable_reasons_name_the_framework():
    tf_adapter, keras_adapter = TFCuDNN(), KerasCuDNN()
    assert "peephole" in tf_adapter.not_applicable_reason(make(cell="lstm", peepholes=True))
    assert "reverse" in tf_adapter.not_applicable_reason(make(cell="lstm", direction="reverse"))
    assert "reset-after" in tf_adapter.not_applicable_reason(make(cell="gru", reset_after=False))
    assert "clip" in tf_adapter.not_applicable_reason(make(cell="lstm", cell_clip=1.0))
    assert tf_adapter.not_applicable_reason(make(cell="lstm", proj_size=2, seq_lengths=[1, 2, 3],
                                                 bidirectional=True, num_layers=3)) is None
    assert "mask" in keras_adapter.not_applicable_reason(make(cell="lstm", seq_lengths=[1, 2, 3]))
    assert "projection" in keras_adapter.not_applicable_reason(make(cell="lstm", proj_size=2))
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        assert keras_adapter.not_applicable_reason(make(cell="gru", dtype=dtype)) is None
