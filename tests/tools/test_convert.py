"""Weight conversion between layouts (``harness.convert``), reading the files people have
(``harness.readers``) and the mapping tables (``rnn-harness layouts``).

The central check: for every pair of layouts that a CPU adapter here runs (the registries are
iterated, so a layout added later is covered), weights in the source layout are converted and
run in the target framework, and its outputs equal the source framework's outputs. Conversions
the target cannot hold are refused with one line naming the reason, taken from the target.
File readers are checked against what the frameworks themselves wrote (a ``torch.save`` file, a
Keras ``.h5``/``.keras`` model, a ``torch.onnx.export`` model) and, for CuDNNLSTM weights,
against tf_keras's own CuDNNLSTM -> LSTM converter.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest

from harness import data, params
from harness.adapters import ADAPTERS
from harness.cli import main
from harness.convert import CannotHold, convert, effective, refusal
from harness.layouts import LAYOUTS, get_layout
from harness.npz import load_npz, save_npz
from harness.readers import read_native
from harness.report.layouts_md import mapping_markdown
from harness.spec import Case

ATOL = 1e-5  # two float32 frameworks, each within ~2e-7 of the float64 reference
# (layout, cell) -> the block a conversion into it would drop, although the layout's adapter
# runs the case: nnx.GRUCell has no b_hn (google/flax#5594; flax-nnx runs it without, DIVERGED)
LOSES = {("flax-nnx", "gru"): "bR_n"}


def _runner_of(layout_name: str):
    """The first available CPU adapter that runs ``layout_name`` (the reference: canonical)."""
    for a in ADAPTERS.values():
        own = a.layout_name or "canonical"
        if own == layout_name and a.device == "cpu" and a.unavailable_reason() is None:
            return a
    return None


CPU_LAYOUTS = [name for name in LAYOUTS if _runner_of(name) is not None]


def _why_no_runner(layout_name: str) -> str:
    """Why no CPU adapter of ``layout_name`` can run here: each one's unavailable reason."""
    return ", ".join(f"{a.name}: {a.unavailable_reason()}" for a in ADAPTERS.values()
                     if (a.layout_name or "canonical") == layout_name and a.device == "cpu"
                     ) or "no CPU adapter has this layout"

CASES = [
    Case(name="lstm-bi2", cell="lstm", input_size=3, hidden_size=3, num_layers=2,
         bidirectional=True, forget_bias=1.0, batch=2, seq_len=4, seq_lengths=[4, 2],
         initial_state="random", seed=3),
    Case(name="gru-after", cell="gru", input_size=3, hidden_size=3, batch=2, seq_len=4,
         initial_state="random", seed=4),
    Case(name="gru-before", cell="gru", input_size=3, hidden_size=3, reset_after=False,
         batch=2, seq_len=4, initial_state="random", seed=5),
    Case(name="lstm-peep", cell="lstm", input_size=2, hidden_size=3, peepholes=True,
         batch=2, seq_len=4, initial_state="random", seed=6),
    Case(name="lstm-proj", cell="lstm", input_size=2, hidden_size=3, proj_size=2,
         batch=2, seq_len=4, initial_state="random", seed=7),
]


def _flat(named: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(named[k], dtype=np.float64).ravel() for k in sorted(named)])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_pair_of_cpu_layouts_reproduces_the_source_framework(case: Case) -> None:
    """Convert A -> B and run B's framework: its outputs are A's framework's outputs."""
    canonical = params.generate(case)
    inputs = data.generate(case)
    runs: dict[tuple[str, bytes], np.ndarray] = {}

    def run(layout_name: str, native: dict[str, np.ndarray]) -> np.ndarray | None:
        adapter = _runner_of(layout_name)
        if adapter.not_applicable_reason(case):  # a run-time feature, not the weights
            return None
        sig = b"".join(np.ascontiguousarray(native[k]).tobytes() for k in sorted(native))
        if (layout_name, sig) not in runs:
            out = adapter._run(case, native, inputs)
            adapter._check(case, out)
            runs[(layout_name, sig)] = _flat(out.named())
        return runs[(layout_name, sig)]

    checked = refused = 0
    for src in CPU_LAYOUTS:
        A = get_layout(src)
        if refusal(case, A) or (src, case.cell) in LOSES:
            continue
        native_a = A.to_native(canonical, case)
        out_a = run(src, native_a)
        for dst in CPU_LAYOUTS:
            B = get_layout(dst)
            reason = refusal(case, B)
            lost = LOSES.get((dst, case.cell))
            if lost and not reason:  # its adapter runs the case, but the tensors cannot hold it
                with pytest.raises(CannotHold, match=f"it would lose {lost}"):
                    convert(case, A, B, native_a)
                refused += 1
                continue
            if reason:
                with pytest.raises(CannotHold, match="cannot hold this case"):
                    convert(case, A, B, native_a)
                refused += 1
                continue
            native_b, _ = convert(case, A, B, native_a)
            assert set(native_b) == set(B.shapes(case))
            # exact: the effective parameters survive, and converting back gives A's tensors
            back, _ = convert(case, B, A, native_b)
            want, got = effective(case, canonical), effective(case, A.from_native(back, case))
            assert all(np.array_equal(want[k], got[k]) for k in want), (src, dst)
            out_b = run(dst, native_b)
            if out_a is not None and out_b is not None:
                err = float(np.abs(out_a - out_b).max())
                assert err < ATOL, f"{case.name}: {src} -> {dst}: outputs differ by {err:.2e}"
                checked += 1
    missing = sorted({"torch", "keras", "onnx", "canonical"} - set(CPU_LAYOUTS))
    if missing:  # a framework not installed here: the pairs it has passed; say what is left
        pytest.skip(f"checked the layouts {CPU_LAYOUTS} only: no available CPU adapter runs "
                    + "; ".join(f"{name} ({_why_no_runner(name)})" for name in missing))
    assert checked >= 4
    if case.name in ("lstm-peep", "lstm-proj", "gru-before"):
        assert refused >= 1  # torch or keras cannot hold these


@pytest.mark.parametrize("case, target, reason", [
    (CASES[3], "torch", "PyTorch nn.LSTM has no peephole connections"),
    (CASES[3], "keras", "no peephole"),
    (CASES[4], "onnx", "projection"),
    (CASES[4], "keras", "projection"),
    (CASES[2], "torch", "reset-after only"),
])
def test_refused_with_the_targets_own_reason(tmp_path: Path, capsys, case: Case, target: str,
                                              reason: str) -> None:
    path = tmp_path / "case.yaml"
    _write_case(path, case)
    save_npz(tmp_path / "w.npz", get_layout("canonical").to_native(params.generate(case), case))
    code = main(["convert", "--case", str(path), "--from", "canonical", "--to", target,
                 str(tmp_path / "w.npz"), str(tmp_path / "out.npz")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and reason in err and target in err, err
    assert not (tmp_path / "out.npz").exists()


def test_round_trip_check_names_what_a_layout_would_lose() -> None:
    """A layout with no adapter is still refused where its round trip drops blocks."""
    case = CASES[3]
    layout = get_layout("tf-cudnn-params") if "tf-cudnn-params" in LAYOUTS else None
    if layout is None or refusal(case, layout):
        pytest.skip("no adapter-less layout to check here")
    with pytest.raises(CannotHold, match="p_f, p_i, p_o"):
        convert(case, get_layout("canonical"), layout,
                get_layout("canonical").to_native(params.generate(case), case))


# Reading real files ------------------------------------------------------------------------------

def _write_case(path: Path, case: Case) -> None:
    import yaml

    d = case.model_dump(exclude={"source", "weights", "inputs", "tolerance", "adapters",
                                 "exclude", "description"}, exclude_none=True)
    path.write_text(yaml.safe_dump(d))


def test_torch_state_dict_file_converts_to_onnx_and_runs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if reason := ADAPTERS["onnxruntime"].unavailable_reason():
        pytest.skip(f"onnxruntime: {reason}")
    case = Case(name="pt", cell="lstm", input_size=3, hidden_size=4, num_layers=2,
                bidirectional=True, batch=2, seq_len=5, initial_state="random", seed=9)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(8, 1)

    torch.manual_seed(0)
    model = Model()
    torch.save(model.state_dict(), tmp_path / "model.pt")
    _write_case(tmp_path / "case.yaml", case)
    out = tmp_path / "onnx.npz"
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), "--from", "torch", "--to",
                 "onnx", str(tmp_path / "model.pt"), str(out)]) == 0
    native = load_npz(out)
    assert set(native) == set(get_layout("onnx").shapes(case))
    # ONNX Runtime on the converted weights == the torch module itself
    inputs = data.generate(case)
    with torch.no_grad():
        x = torch.from_numpy(inputs.x.astype(np.float32))
        y, (h, c) = model.encoder(x, (torch.from_numpy(inputs.h0.astype(np.float32)),
                                      torch.from_numpy(inputs.c0.astype(np.float32))))
    ort = ADAPTERS["onnxruntime"]
    got = ort._run(case, native, inputs)
    assert np.abs(got.y - y.numpy()).max() < ATOL
    assert np.abs(got.h_n - h.numpy()).max() < ATOL
    assert np.abs(got.c_n - c.numpy()).max() < ATOL


def test_torch_file_with_two_rnn_modules_needs_select(tmp_path: Path, capsys) -> None:
    torch = pytest.importorskip("torch")
    case = Case(name="pt2", cell="gru", input_size=3, hidden_size=2)
    state = {**{f"enc.{k}": v for k, v in torch.nn.GRU(3, 2).state_dict().items()},
             **{f"dec.{k}": v for k, v in torch.nn.GRU(3, 2).state_dict().items()}}
    torch.save(state, tmp_path / "two.pth")
    _write_case(tmp_path / "case.yaml", case)
    args = ["convert", "--case", str(tmp_path / "case.yaml"), "--from", "torch", "--to", "keras",
            str(tmp_path / "two.pth"), str(tmp_path / "k.npz")]
    assert main(args) == 2
    assert "several RNN modules" in capsys.readouterr().err
    assert main(args + ["--select", "dec"]) == 0
    k = load_npz(tmp_path / "k.npz")
    # Keras GRU order z, r, h: kernel block 0 is the torch z block (rows H:2H) transposed
    assert np.allclose(k["kernel"][:, 0:2], state["dec.weight_ih_l0"][2:4].numpy().T)


@pytest.fixture(scope="module")
def tf_keras():
    pytest.importorskip("tensorflow")
    return pytest.importorskip("tf_keras")


def test_keras_h5_and_keras_files_read_as_the_layers_weights(tmp_path: Path, tf_keras) -> None:
    case = Case(name="kh5", cell="lstm", input_size=3, hidden_size=4, bidirectional=True,
                batch=2, seq_len=5, seed=2)
    K = tf_keras
    model = K.Sequential([K.layers.Input((5, 3)),
                          K.layers.Bidirectional(K.layers.LSTM(4, return_sequences=True)),
                          K.layers.Dense(1)])
    fw, bw = model.layers[0].forward_layer, model.layers[0].backward_layer
    want = {f"layer0/{d}/{n}": v for d, layer in (("forward", fw), ("backward", bw))
            for n, v in zip(("kernel", "recurrent_kernel", "bias"), layer.get_weights(),
                            strict=True)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(tmp_path / "m.h5")
    model.save_weights(tmp_path / "w.h5")
    model.save(tmp_path / "m.keras")
    for f in ("m.h5", "w.h5", "m.keras"):
        native, _ = read_native(tmp_path / f, "keras", case)
        assert set(native) == set(want), f
        assert all(np.array_equal(native[k], want[k]) for k in want), f
    # the tf_keras model's own output == torch on the converted weights
    inputs = data.generate(case)
    y = model.layers[0](inputs.x.astype(np.float32)).numpy()
    torch_native, _ = convert(case, get_layout("keras"), get_layout("torch"), native)
    got = ADAPTERS["torch-cpu"]._run(case, torch_native, inputs)
    assert np.abs(got.y - y).max() < ATOL


def test_keras3_file(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras")
    case = Case(name="k3", cell="gru", input_size=3, hidden_size=2, reset_after=False)
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.GRU(2, reset_after=False),
                              keras.layers.Dense(1)])
    model.save(tmp_path / "m.keras")
    native, _ = read_native(tmp_path / "m.keras", "keras", case)
    want = model.layers[0].get_weights()
    assert [native[n].shape for n in ("kernel", "recurrent_kernel", "bias")] == \
        [w.shape for w in want]
    assert all(np.array_equal(native[n], w) for n, w in
               zip(("kernel", "recurrent_kernel", "bias"), want, strict=True))
    with pytest.raises(Exception, match="reset_after"):  # the file says reset-before
        read_native(tmp_path / "m.keras", "keras", case.model_copy(update={"reset_after": True}))


def test_cudnnlstm_h5_matches_tf_keras_own_converter(tmp_path: Path, tf_keras, capsys) -> None:
    """CuDNNLSTM builds on CPU. Its .h5 reads as keras-cudnn only, and keras-cudnn -> keras is
    what tf_keras's HDF5 loader does to load CuDNNLSTM weights into an LSTM."""
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM
    from tf_keras.src.saving.legacy.hdf5_format import _convert_rnn_weights

    K = tf_keras
    case = Case(name="cudnn", cell="lstm", input_size=3, hidden_size=2, batch=1, seq_len=4)
    layer = CuDNNLSTM(2, return_sequences=True)
    model = K.Sequential([K.layers.Input((4, 3)), layer])
    rng = np.random.default_rng(0)
    layer.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in layer.get_weights()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(tmp_path / "cudnn.h5")
    _write_case(tmp_path / "case.yaml", case)
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), "--from", "keras",
                 "--to", "torch", str(tmp_path / "cudnn.h5"), str(tmp_path / "x.npz")]) == 2
    assert "CuDNNLSTM" in capsys.readouterr().err
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), "--from", "keras-cudnn",
                 "--to", "keras", str(tmp_path / "cudnn.h5"), str(tmp_path / "k.npz")]) == 0
    ours = load_npz(tmp_path / "k.npz")
    lstm = K.layers.LSTM(2)
    lstm.build((None, 4, 3))
    theirs = _convert_rnn_weights(lstm, layer.get_weights())
    for name, t in zip(("kernel", "recurrent_kernel", "bias"), theirs, strict=True):
        assert np.allclose(ours[name], t, rtol=0, atol=1e-6), name


def test_onnx_model_from_the_torch_exporter(tmp_path: Path, capsys) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    case = Case(name="ox", cell="gru", input_size=3, hidden_size=4, bidirectional=True)
    torch.manual_seed(1)
    gru = torch.nn.GRU(3, 4, bidirectional=True)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(gru, (torch.zeros(5, 2, 3),), f, dynamo=False, opset_version=18)
    (tmp_path / "gru.onnx").write_bytes(f.getvalue())
    native, _ = read_native(tmp_path / "gru.onnx", "onnx", case)
    state = {k: v.numpy() for k, v in gru.state_dict().items()}
    want, _ = convert(case, get_layout("torch"), get_layout("onnx"), state)
    assert set(native) == set(want)
    for k in want:
        assert np.allclose(native[k], want[k], rtol=0, atol=1e-7), k
    _write_case(tmp_path / "case.yaml", case.model_copy(update={"reset_after": False}))
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), "--from", "onnx", "--to",
                 "keras", str(tmp_path / "gru.onnx"), str(tmp_path / "k.npz")]) == 2
    assert "linear_before_reset" in capsys.readouterr().err


def test_matrix_case_file_picks_the_case_the_weights_fit(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: m\ncell: lstm\ninput_size: 1\nmatrix:\n  hidden_size: [1, 2]\n")
    case = Case(name="m-h2", cell="lstm", input_size=1, hidden_size=2)
    save_npz(tmp_path / "w.npz", get_layout("torch").to_native(params.generate(case), case))
    assert main(["convert", "--case", str(tmp_path / "m.yaml"), "--from", "torch", "--to",
                 "keras", str(tmp_path / "w.npz"), str(tmp_path / "k.npz")]) == 0
    assert load_npz(tmp_path / "k.npz")["kernel"].shape == (1, 8)


# Mapping tables ----------------------------------------------------------------------------------

TABLE_CASES = [
    Case(name="one", cell="lstm", input_size=3, hidden_size=4),
    Case(name="fb", cell="lstm", input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
         forget_bias=1.0),
    Case(name="gru", cell="gru", input_size=3, hidden_size=4),
]


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
def test_mapping_tables_render_for_every_layout(layout: str) -> None:
    lay = get_layout(layout)
    # every layout holds an LSTM (the first two cases), most a GRU; each described case is
    # rendered and checked, none passed over
    described = [case for case in TABLE_CASES if case.cell in lay.cells]
    assert len(described) >= 2, f"{layout} describes only {[c.name for c in described]}"
    for case in described:
        text = mapping_markdown(lay, case)
        rows = [r for r in text.splitlines() if r.startswith("| ") and "---" not in r][1:]
        assert len(rows) == sum(len(t.placements) for t in lay.tensors(case))
        single = case.num_layers == 1 and case.num_directions == 1
        assert ("(layer 0, forward)" in text) != single, layout
        folded = any(pl.fold_forget_bias for t in lay.tensors(case) for pl in t.placements)
        if case.forget_bias and case.cell == "lstm":
            assert ("forget_bias (1)" in text) == folded, layout
            if not folded:
                assert "forget gate gets +1.0 at run time" in text, layout
        else:
            assert "forget_bias (" not in text
        if any(pl.transform == "reshape" for t in lay.tensors(case) for pl in t.placements):
            assert "cuDNN matrix" in text


# Framework files out, sizes read from the file (no --case) --------------------------------------

def _torch_outputs(module, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return module(torch.from_numpy(x))[0].numpy()


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_pt_to_onnx_and_weights_h5_and_back_without_a_case(tmp_path: Path, capsys,
                                                           cell: str) -> None:
    """A torch .pt state_dict converted with no --case to an ONNX model and Keras 3 weights:
    each, loaded by its own framework, gives the torch module's outputs; converted back to .pt,
    it loads into nn.LSTM/GRU and gives them again."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    keras = pytest.importorskip("keras")
    torch.manual_seed(0)
    rnn = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell]
    make = lambda: rnn(3, 4, num_layers=2, bidirectional=True, batch_first=True)  # noqa: E731
    module = make()
    torch.save({"enc." + k: v for k, v in module.state_dict().items()}, tmp_path / "m.pt")
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    want = _torch_outputs(module, x)
    for out in ("m.onnx", "m.weights.h5"):
        assert main(["convert", str(tmp_path / "m.pt"), str(tmp_path / out)]) == 0, \
            capsys.readouterr().err
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (y,) = sess.run(["Y1"], {"X": x.transpose(1, 0, 2)})
    assert np.abs(y.transpose(2, 0, 1, 3).reshape(2, 5, -1) - want).max() < ATOL
    layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[cell]
    model = keras.Sequential([keras.Input((None, 3))] + [
        keras.layers.Bidirectional(layer(4, return_sequences=True)) for _ in range(2)])
    model.load_weights(tmp_path / "m.weights.h5")
    assert np.abs(np.asarray(model(x)) - want).max() < ATOL
    for src in ("m.onnx", "m.weights.h5"):
        back = tmp_path / f"back-{src}.pt"
        assert main(["convert", str(tmp_path / src), str(back)]) == 0, capsys.readouterr().err
        again = make()
        again.load_state_dict(torch.load(back, weights_only=True))
        assert np.abs(_torch_outputs(again, x) - want).max() < ATOL, src


def test_a_semantic_the_target_cannot_express_is_refused_in_one_line(tmp_path: Path,
                                                                    capsys) -> None:
    """Hard-sigmoid gates (an ONNX node with HardSigmoid, a case that says so) cannot go to
    PyTorch, as a .pt or as torch .npz tensors: exit 2, one line, nothing written."""
    pytest.importorskip("onnx")
    from harness.frameworks.onnx import build_model

    case = Case(name="hs", cell="lstm", input_size=3, hidden_size=4,
                recurrent_activation="hard_sigmoid_tf_keras")
    native = get_layout("onnx").to_native(params.generate(case), case)
    import onnx

    onnx.save(build_model(case, native), str(tmp_path / "hs.onnx"))
    for out, extra in (("hs.pt", []), ("hs.npz", ["--to", "torch"])):
        code = main(["convert", str(tmp_path / "hs.onnx"), str(tmp_path / out), *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "sigmoid" in err, err
        assert not (tmp_path / out).exists()
    # the same weights go where a hard sigmoid exists: Keras 2 (tf_keras) tensors
    assert main(["convert", str(tmp_path / "hs.onnx"), str(tmp_path / "k.npz"),
                 "--to", "keras"]) == 0
    # and a peephole case has no .weights.h5
    peep = case.model_copy(update={"peepholes": True, "recurrent_activation": "sigmoid"})
    onnx.save(build_model(peep, get_layout("onnx").to_native(params.generate(peep), peep)),
              str(tmp_path / "p.onnx"))
    assert main(["convert", str(tmp_path / "p.onnx"), str(tmp_path / "p.weights.h5")]) == 2
    assert "peephole" in capsys.readouterr().err


def test_an_npz_output_needs_no_to_when_the_source_layout_is_known(tmp_path: Path,
                                                                    capsys) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.GRU(3, 2, num_layers=2, bidirectional=True)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    # the file tells its layout and sizes: its own tensors, checked and bare
    assert main(["convert", str(tmp_path / "model.pt"), str(tmp_path / "w.npz")]) == 0
    assert "to 16 of layout 'torch'" in capsys.readouterr().out
    native = load_npz(tmp_path / "w.npz")
    assert native.keys() == model.state_dict().keys()
    for name, t in model.state_dict().items():
        np.testing.assert_array_equal(native[name], t.numpy())
    # with a case, an .npz's layout is the one its tensors fit: no --from, no --to
    case = Case(name="g", cell="gru", input_size=3, hidden_size=2, num_layers=2,
                bidirectional=True)
    _write_case(tmp_path / "case.yaml", case)
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), str(tmp_path / "w.npz"),
                 str(tmp_path / "again.npz")]) == 0
    assert "layout 'torch': the only one the tensors fit" in capsys.readouterr().out
    assert load_npz(tmp_path / "again.npz").keys() == native.keys()
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), "--to", "keras",
                 str(tmp_path / "w.npz"), str(tmp_path / "k.npz")]) == 0
    save_npz(tmp_path / "odd.npz", {"weights": np.zeros(3)})
    assert main(["convert", "--case", str(tmp_path / "case.yaml"), str(tmp_path / "odd.npz"),
                 str(tmp_path / "o.npz")]) == 2
    assert "odd.npz: --from: its tensors fit no layout's names and shapes for this case: give " \
           "--from" in capsys.readouterr().err
