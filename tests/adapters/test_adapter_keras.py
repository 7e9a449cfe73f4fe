"""The ``keras`` layout and the tf_keras (``keras``) and Keras 3 (``keras3``) adapters.

Adapters are compared with the float64 reference on small cases; the layout is checked against
the variables the frameworks themselves create, and for an exact canonical round trip.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from support.case_factory import case_maker

from harness import data, params, reference
from harness.adapters.keras import Keras
from harness.adapters.keras3 import Keras3
from harness.dtypes import round_to
from harness.layouts import get_layout
from harness.spec import Case

LAYOUT = get_layout("keras")
ADAPTERS = {"keras": Keras(), "keras3": Keras3()}


make = case_maker(seed=3)


def adapter_or_skip(name: str):
    adapter = ADAPTERS[name]
    reason = adapter.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return adapter


def module_of(name: str):
    """(tensorflow, Keras module, layer kwargs, activation names) of an adapter."""
    adapter = adapter_or_skip(name)
    tf, K = adapter.import_keras()
    return tf, K, dict(adapter.layer_kwargs), adapter.activations


def max_errors(out, ref) -> dict[str, float]:
    errs = {k: float(np.abs(v - ref.named()[k]).max()) for k, v in out.named().items()}
    assert out.y_layers is not None and len(out.y_layers) == len(ref.y_layers)
    errs["y_layers"] = max(float(np.abs(a - b).max()) for a, b in zip(out.y_layers, ref.y_layers,
                                                                         strict=True))
    return errs


def run_both(adapter, case: Case):
    canonical, inputs = params.generate(case), data.generate(case)
    assert adapter.not_applicable_reason(case) is None, adapter.not_applicable_reason(case)
    out, _ = adapter.run(case, canonical, inputs)
    return out, reference.run(case, canonical, inputs), inputs


# Layout -------------------------------------------------------------------------------------

LAYOUT_CASES = [
    make(cell="lstm", forget_bias=1.0),
    make(cell="lstm", num_layers=2, bidirectional=True, forget_bias=-0.5),
    make(cell="lstm", direction="reverse", num_layers=2),
    make(cell="gru", reset_after=True, num_layers=2, bidirectional=True),
    make(cell="gru", reset_after=False),
    make(cell="gru", reset_after=False, num_layers=3),
]


def layout_id(c: Case) -> str:
    gru = "" if c.cell == "lstm" else f"-ra{c.reset_after}"
    return f"{c.cell}-{c.dir_mode}-L{c.num_layers}{gru}"


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=layout_id)
def test_round_trip(case: Case) -> None:
    canonical = params.generate(case)
    native = LAYOUT.to_native(canonical, case)
    back = LAYOUT.from_native(native, case)
    assert set(back.tensors) == set(canonical.tensors)
    summed = not (case.cell == "gru" and case.reset_after)
    for layer, d in params.layer_dirs(case):
        for g in case.gates:
            for kind in ("W", "R"):
                k = params.key(layer, d, f"{kind}_{g}")
                np.testing.assert_array_equal(back[k], canonical[k])
            bW, bR = params.key(layer, d, f"bW_{g}"), params.key(layer, d, f"bR_{g}")
            if summed:  # one Keras bias: only bW + bR survives (exactly, forget_bias removed)
                np.testing.assert_allclose(back[bW] + back[bR], canonical[bW] + canonical[bR],
                                           rtol=0, atol=1e-15)
            else:
                np.testing.assert_array_equal(back[bW], canonical[bW])
                np.testing.assert_array_equal(back[bR], canonical[bR])
    again = LAYOUT.to_native(back, case)  # native -> canonical -> native is the identity
    assert set(again) == set(native)
    for name, arr in native.items():
        np.testing.assert_allclose(again[name], arr, rtol=0, atol=1e-15)


def test_lstm_blocks_are_transposed_in_keras_order_with_forget_bias_folded() -> None:
    case = make(cell="lstm", forget_bias=1.0)
    canonical = params.generate(case)
    native = LAYOUT.to_native(canonical, case)
    H = case.hidden_size
    assert set(native) == {"kernel", "recurrent_kernel", "bias"}
    for j, g in enumerate("ifgo"):  # Keras i f c o == canonical i f g o
        blk = slice(j * H, (j + 1) * H)
        np.testing.assert_array_equal(native["kernel"][:, blk],
                                      canonical[f"layer0/forward/W_{g}"].T)
        np.testing.assert_array_equal(native["recurrent_kernel"][:, blk],
                                      canonical[f"layer0/forward/R_{g}"].T)
        expected = canonical[f"layer0/forward/bW_{g}"] + canonical[f"layer0/forward/bR_{g}"]
        np.testing.assert_array_equal(native["bias"][blk], expected + (1.0 if g == "f" else 0.0))


def test_gru_order_and_bias_rows() -> None:
    case = make(cell="gru", reset_after=True)
    canonical = params.generate(case)
    native = LAYOUT.to_native(canonical, case)
    H = case.hidden_size
    assert native["bias"].shape == (2, 3 * H)
    for j, g in enumerate("zrn"):  # Keras z r h
        blk = slice(j * H, (j + 1) * H)
        np.testing.assert_array_equal(native["kernel"][:, blk],
                                      canonical[f"layer0/forward/W_{g}"].T)
        np.testing.assert_array_equal(native["bias"][0, blk], canonical[f"layer0/forward/bW_{g}"])
        np.testing.assert_array_equal(native["bias"][1, blk], canonical[f"layer0/forward/bR_{g}"])
    assert LAYOUT.shapes(make(cell="gru", reset_after=False))["bias"] == (3 * H,)


def test_names_are_scoped_for_stacks_and_bidirectional() -> None:
    assert set(LAYOUT.shapes(make(cell="lstm"))) == {"kernel", "recurrent_kernel", "bias"}
    shapes = LAYOUT.shapes(make(cell="lstm", num_layers=2, bidirectional=True))
    assert shapes["layer1/backward/kernel"] == (8, 16)
    assert len(shapes) == 12
    assert set(LAYOUT.shapes(make(cell="gru", direction="reverse", num_layers=2))) == {
        f"layer{k}/backward/{n}" for k in range(2) for n in ("kernel", "recurrent_kernel", "bias")}


def test_runtime_notes_state_the_masking_convention() -> None:
    notes = " ".join(LAYOUT.runtime(make(cell="lstm", seq_lengths=[6, 3, 1])))
    assert "repeats the last valid output" in notes and "write 0" in notes
    notes = " ".join(LAYOUT.runtime(make(cell="lstm", seq_lengths=[6, 3, 1], bidirectional=True)))
    assert "zero_output_for_mask=True" in notes
    assert not any("padded" in n for n in LAYOUT.runtime(make(cell="lstm")))


# Native names and shapes against the frameworks ----------------------------------------------

@pytest.mark.keras
@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("case", LAYOUT_CASES + [make(cell="gru", direction="reverse")],
                         ids=layout_id)
def test_layout_matches_framework_variables(name: str, case: Case) -> None:
    from harness.frameworks.keras import make_layers, variable_shapes

    tf, K, kw, _ = module_of(name)
    with tf.device("/CPU:0"):
        layers = make_layers(K, case, activation="sigmoid", layer_kwargs=kw)
    assert variable_shapes(case, layers) == LAYOUT.shapes(case)


# Adapters against the reference ------------------------------------------------------------

RUN_CASES = [
    make(cell="lstm"),
    make(cell="lstm", forget_bias=1.0, initial_state="random"),
    make(cell="lstm", direction="reverse", initial_state="random", seq_lengths=[6, 3, 1]),
    make(cell="lstm", bidirectional=True, num_layers=2, initial_state="random",
         seq_lengths=[4, 6, 1], forget_bias=0.5),
    make(cell="lstm", num_layers=3, initial_state="random", seq_lengths=[2, 6, 5]),
    make(cell="gru", reset_after=True, initial_state="random"),
    make(cell="gru", reset_after=False, initial_state="random"),
    make(cell="gru", reset_after=False, bidirectional=True, num_layers=2, initial_state="random",
         seq_lengths=[6, 3, 1]),
    make(cell="gru", reset_after=True, direction="reverse", num_layers=2, initial_state="random",
         seq_lengths=[1, 5, 6]),
    make(cell="gru", reset_after=True, num_layers=2, initial_state="random", seq_lengths=[3, 6, 2]),
    make(cell="lstm", dtype="float64", bidirectional=True, num_layers=2, initial_state="random",
         seq_lengths=[6, 3, 1]),
    make(cell="gru", dtype="float64", direction="reverse", initial_state="random",
         seq_lengths=[6, 3, 1]),
]


def case_id(c: Case) -> str:
    parts = [c.cell, c.dir_mode, f"L{c.num_layers}", c.dtype]
    if c.cell == "gru":
        parts.append(f"ra{c.reset_after}")
    if c.seq_lengths:
        parts.append("var")
    if c.forget_bias:
        parts.append(f"fb{c.forget_bias}")
    return "-".join(parts)


@pytest.mark.keras
@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("case", RUN_CASES, ids=case_id)
def test_matches_reference(name: str, case: Case) -> None:
    adapter = adapter_or_skip(name)
    out, ref, _ = run_both(adapter, case)
    atol = 1e-13 if case.dtype == "float64" else 1e-6
    errs = max_errors(out, ref)
    assert max(errs.values()) < atol, f"{name} {case_id(case)}: {errs}"
    if case.seq_lengths:  # the contract: padded steps of y (every layer) are exactly 0
        valid = np.arange(case.seq_len)[None, :] < np.asarray(case.seq_lengths)[:, None]
        for y in out.y_layers:
            assert not y[~valid].any()


@pytest.mark.keras
@pytest.mark.parametrize("name, activation", [("keras", "hard_sigmoid_tf_keras"),
                                              ("keras3", "hard_sigmoid_keras3")])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_hard_sigmoid(name: str, activation: str, cell: str) -> None:
    adapter = adapter_or_skip(name)
    # large weights so that pre-activations reach the clipped region of hard_sigmoid
    case = make(cell=cell, recurrent_activation=activation, initial_state="random",
                weights={"init": "normal", "scale": 2.0}, seq_lengths=[6, 2, 4])
    out, ref, _ = run_both(adapter, case)
    assert max(max_errors(out, ref).values()) < 1e-5
    other = {"hard_sigmoid_tf_keras": "hard_sigmoid_keras3",
             "hard_sigmoid_keras3": "hard_sigmoid_tf_keras"}[activation]
    wrong = reference.run(case.model_copy(update={"recurrent_activation": other}),
                          params.generate(case), data.generate(case))
    assert np.abs(out.y - wrong.y).max() > 1e-2  # the two definitions really differ here


@pytest.mark.keras
@pytest.mark.parametrize("name", ADAPTERS)
@pytest.mark.parametrize("dtype, atol", [("float16", 5e-3), ("bfloat16", 3e-2)])
@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_half_precision_runs_in_that_dtype(name: str, dtype: str, atol: float, cell: str) -> None:
    adapter = adapter_or_skip(name)
    case = make(cell=cell, dtype=dtype, bidirectional=True, num_layers=2, initial_state="random",
                seq_lengths=[6, 2, 4])
    out, ref, _ = run_both(adapter, case)
    assert max(max_errors(out, ref).values()) < atol
    for v in out.named().values():  # computed in the case dtype, not float32 behind its back
        np.testing.assert_array_equal(v, round_to(v, dtype))
    assert np.abs(out.y - ref.y).max() > 0


# Framework facts the adapters rely on ------------------------------------------------------

@pytest.mark.keras
@pytest.mark.parametrize("name", ADAPTERS)
def test_masking_conventions_of_the_framework(name: str) -> None:
    """Keras CPU repeats the last valid output at padded steps of a unidirectional layer (what
    the adapter zeroes and the layout's runtime notes declare); Bidirectional writes zeros."""
    tf, K, kw, _ = module_of(name)
    lengths = np.array([6, 3, 1])
    mask = tf.constant(np.arange(6)[None, :] < lengths[:, None])
    x = tf.constant(np.random.default_rng(0).normal(size=(3, 6, 3)), dtype="float32")
    init = dict(kernel_initializer="glorot_uniform", **kw)
    with tf.device("/CPU:0"):
        y = K.layers.LSTM(4, return_sequences=True, **init)(x, mask=mask).numpy()
        yb = K.layers.Bidirectional(K.layers.GRU(4, return_sequences=True, **init))(
            x, mask=mask).numpy()
    for b, n in enumerate(lengths):
        assert np.abs(y[b, n - 1]).max() > 0
        for t in range(n, 6):
            np.testing.assert_array_equal(y[b, t], y[b, n - 1])
            assert not yb[b, t].any()


@pytest.mark.keras
@pytest.mark.parametrize("name, library", [("keras", "tf_keras"), ("keras3", "keras")])
def test_versions_name_tensorflow_and_the_keras_library(name: str, library: str) -> None:
    """What run.json records: the two adapters share one class and differ in its data."""
    adapter = adapter_or_skip(name)
    tf, K = adapter.import_keras()
    assert K.__name__ == library
    assert adapter.versions() == {"tensorflow": tf.__version__, library: K.__version__}


@pytest.mark.parametrize("name", ADAPTERS)
def test_not_applicable_reasons(name: str) -> None:
    adapter = ADAPTERS[name]
    cases = {
        "peephole": make(cell="lstm", peepholes=True),
        "projection": make(cell="lstm", proj_size=2),
        "cell clipping": make(cell="lstm", cell_clip=1.0),
        "gate pre-activation clipping": make(cell="gru", gate_clip=1.0),
        "coupled input-forget": make(cell="lstm", input_forget=True),
    }
    for words, case in cases.items():
        reason = adapter.not_applicable_reason(case)
        assert reason and words in reason
        assert ("tf_keras" if name == "keras" else "Keras 3") in reason
    other = "hard_sigmoid_keras3" if name == "keras" else "hard_sigmoid_tf_keras"
    assert other in adapter.not_applicable_reason(make(cell="lstm", recurrent_activation=other))
    for case in RUN_CASES:
        assert adapter.not_applicable_reason(case) is None


def test_importing_the_adapters_imports_no_framework() -> None:
    code = ("import sys, harness.adapters.keras, harness.adapters.keras3;"
            "bad = [m for m in ('tensorflow', 'tf_keras', 'keras') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.keras
def test_keras3_unavailable_with_another_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.adapters._keras import import_keras3
    from harness.errors import Unavailable

    _, keras, _, _ = module_of("keras3")
    # Keras 3 fixes its backend at import; a process that loaded it with torch cannot switch.
    monkeypatch.setattr(keras.backend, "backend", lambda: "torch")
    with pytest.raises(Unavailable, match="'torch' backend"):
        import_keras3()
