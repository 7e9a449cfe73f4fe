"""Standalone reproducers (harness/repro/): the report writes repro/<case>/<adapter>/ for a
known upstream bug or a planted divergence, and its repro.py, run where rnn-harness cannot be
imported, exits 1 and names the first diverging step the harness found; a passing pair's
reproducer, forced with ``rnn-harness repro``, exits 0. The ONNX backend-test folder loads with
onnx's test-data conventions: onnx.reference matches its float64-derived outputs, OpenVINO does
not (openvinotoolkit/openvino#37820)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from support.repro_run import first_line, run_repro
from support.runnable import runnable

from harness import compare, runner
from harness.adapters import get_adapter
from harness.cli import main
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.report import write_report
from harness.repro.write import safe_name
from harness.run_options import RunOptions
from harness.spec import Case

TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, initial_state="random",
            dtype="float32")


def _run(case: Case, adapters: list[str], out):
    result = runner.run([case], [get_adapter(a) for a in adapters])
    write_report(result, out)
    return {p.adapter: p for p in result.pairs}


@pytest.mark.jax
def test_flax_nnx_gru_bug_reproduces_without_the_harness(tmp_path):
    runnable("flax-nnx")
    case = Case(name="tiny-gru", cell="gru", seed=3, **TINY,
                expected={"flax-nnx": {"verdict": "DIVERGED", "upstream": "google/flax#5594"}})
    assert np.abs(prepare(case).canonical["layer0/forward/bR_n"]).max() > 0.05  # what nnx drops
    pairs = _run(case, ["reference", "flax-nnx"], tmp_path / "r")
    pair = pairs["flax-nnx"]
    assert pair.status == compare.KNOWN_BUG
    folder = tmp_path / "r" / "repro" / safe_name(case.name) / "flax-nnx"
    text = (folder / "repro.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+harness\b", text, re.M)
    done = run_repro(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout
    readme = (folder / "README.md").read_text()
    assert "google/flax#5594" in readme and "https://github.com/google/flax/issues/5594" in readme
    assert "python repro.py" in readme and "`reference`" not in readme.split("agree")[0]


def _batch_major_regardless():
    from harness.adapters.openvino import OpenVINO, OpenVINOBatchMajor

    class Regardless(OpenVINOBatchMajor):
        def check_available(self) -> None:
            OpenVINO.check_available(self)

    return Regardless()


@pytest.mark.openvino
def test_openvino_batch_major_reproducer_and_onnx_test_folder(tmp_path):
    pytest.importorskip("onnx")
    runnable("openvino")
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    case = Case(name="bm", cell="lstm", bidirectional=True, seed=17,
                **(TINY | {"seq_len": 2}),  # batch = steps = directions: OpenVINO runs it
                expected={"openvino-batch-major": {"verdict": "DIVERGED",
                                                   "upstream": "openvinotoolkit/openvino#37820"}})
    pairs = _run(case, ["reference", "openvino-batch-major", "onnx-reference"], tmp_path / "r")
    folder = tmp_path / "r" / "repro" / "bm" / "openvino-batch-major"
    fixed = get_adapter("openvino-batch-major").layout_ignored() is None
    done = run_repro(folder)
    if fixed:  # upstream fixed: the pair passes ("looks fixed") and so does its reproducer
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert pairs["openvino-batch-major"].status == compare.UNAVAILABLE
    # the harness's finding, the pair run regardless of its availability check
    ran = run_pair(prepare(case), _batch_major_regardless())
    assert ran.status == compare.KNOWN_BUG
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(ran.first_diverging) in done.stdout

    model = onnx.load(str(folder / "model.onnx"))
    data = folder / "test_data_set_0"

    def read(path):
        t = onnx.TensorProto()
        t.ParseFromString(path.read_bytes())
        return t.name, numpy_helper.to_array(t)

    feeds = dict(read(data / f"input_{n}.pb") for n in range(len(model.graph.input)))
    assert list(feeds) == [i.name for i in model.graph.input]
    expected = dict(read(data / f"output_{n}.pb") for n in range(len(model.graph.output)))
    assert list(expected) == [o.name for o in model.graph.output]
    got = dict(zip(expected, ReferenceEvaluator(model).run(list(expected), feeds), strict=True))
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, atol=1e-5, rtol=1e-5, err_msg=name)

    import openvino as ov

    compiled = ov.Core().compile_model(ov.Core().read_model(str(folder / "model.onnx")), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    ov_out = {p.get_any_name(): v for p, v in compiled(feeds).items()}
    assert max(np.abs(ov_out[n] - expected[n]).max() for n in expected) > 0.05


@pytest.mark.onnx
def test_planted_divergence_is_recorded_and_reproduced(tmp_path, monkeypatch):
    """The onnxruntime adapter hands ORT a GRU node with linear_before_reset flipped: the pair
    diverges, and the reproducer (the model as handed) shows it without the harness."""
    runnable("onnxruntime")
    import onnx

    from harness.frameworks import onnx as harness_graph

    real = harness_graph.node_attributes

    def flipped(case, layout=0):
        attrs = real(case, layout)
        attrs["linear_before_reset"] = 1 - attrs["linear_before_reset"]
        return attrs

    monkeypatch.setattr(harness_graph, "node_attributes", flipped)
    case = Case(name="planted", cell="gru", reset_after=True, seed=4, **TINY)
    pair = _run(case, ["reference", "onnxruntime"], tmp_path / "r")["onnxruntime"]
    assert pair.status == compare.DIVERGED
    # run --no-repro: no record, no folder
    off = runner.run([case], [get_adapter("reference"), get_adapter("onnxruntime")],
                     RunOptions(repro=False))
    assert [p.repro for p in off.pairs] == [None, None] and off.pairs[1].status == pair.status
    write_report(off, tmp_path / "off")
    assert not (tmp_path / "off" / "repro").exists()
    folder = tmp_path / "r" / "repro" / "planted" / "onnxruntime"
    node = onnx.load(str(folder / "model.onnx")).graph.node[0]
    assert onnx.helper.get_attribute_value(
        next(a for a in node.attribute if a.name == "linear_before_reset")) == 0
    monkeypatch.undo()
    done = run_repro(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.onnx
def test_an_error_row_with_outputs_gets_a_reproducer(tmp_path, monkeypatch):
    """onnx.reference fed an x with a NaN returns NaN: an error row, whose reproducer feeds
    the graph what it was fed and shows the NaN from the first step."""
    runnable("onnx-reference")
    from harness.adapters import onnx_reference

    real = onnx_reference.feeds

    def poisoned(case, inputs, **kw):
        feed = real(case, inputs, **kw)
        feed["X"] = feed["X"].copy()
        feed["X"][0, 0, 0] = np.nan
        return feed

    monkeypatch.setattr(onnx_reference, "feeds", poisoned)
    case = Case(name="nan", cell="lstm", seed=1, **(TINY | {"dtype": "float64"}))
    pair = _run(case, ["reference", "onnx-reference"], tmp_path / "r")["onnx-reference"]
    assert pair.status == compare.ERROR and "non-finite" in pair.reason
    monkeypatch.undo()
    done = run_repro(tmp_path / "r" / "repro" / "nan" / "onnx-reference")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "first diverging: y layer 0 direction 0 t=0 (max |error| nan" in done.stdout


@pytest.mark.torch
def test_planted_gate_swap_in_torch_weights_is_reproduced(tmp_path, monkeypatch):
    """torch-cpu hands nn.GRU a state_dict with the r and z rows of weight_ih_l0 swapped."""
    adapter = runnable("torch-cpu")
    real = type(adapter)._run

    def swapped(self, case, native, inputs):
        native = dict(native)
        w, H = native["weight_ih_l0"].copy(), case.hidden_size
        w[:H], w[H:2 * H] = native["weight_ih_l0"][H:2 * H], native["weight_ih_l0"][:H]
        native["weight_ih_l0"] = w
        return real(self, case, native, inputs)

    monkeypatch.setattr(type(adapter), "_run", swapped)
    case = Case(name="swap", cell="gru", seed=9, seq_lengths=[4, 2], **TINY)
    pair = _run(case, ["reference", "torch-cpu"], tmp_path / "r")["torch-cpu"]
    assert pair.status == compare.DIVERGED
    monkeypatch.undo()
    done = run_repro(tmp_path / "r" / "repro" / "swap" / "torch-cpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.keras
def test_planted_gate_swap_in_keras_weights_is_reproduced(tmp_path, monkeypatch):
    """The Keras adapter hands its bidirectional GRU a kernel with two gate blocks swapped."""
    adapter = runnable("keras")
    real = type(adapter)._run

    def swapped(self, case, native, inputs):
        native, H = dict(native), case.hidden_size
        name = "layer0/backward/kernel"
        w = native[name].copy()
        w[:, :H], w[:, H:2 * H] = native[name][:, H:2 * H], native[name][:, :H]
        native[name] = w
        return real(self, case, native, inputs)

    monkeypatch.setattr(type(adapter), "_run", swapped)
    case = Case(name="swap", cell="gru", reset_after=False, bidirectional=True, seed=2,
                seq_lengths=[4, 3], **TINY)
    pair = _run(case, ["reference", "keras"], tmp_path / "r")["keras"]
    assert pair.status == compare.DIVERGED
    monkeypatch.undo()
    done = run_repro(tmp_path / "r" / "repro" / "swap" / "keras")
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.onnx
def test_forced_reproducer_of_a_passing_pair_exits_0(tmp_path, capsys):
    runnable("onnxruntime")
    case = Case(name="passes", cell="lstm", seed=6, **TINY)
    pairs = _run(case, ["reference", "onnxruntime"], tmp_path / "r")
    assert pairs["onnxruntime"].status == compare.PASS
    assert not (tmp_path / "r" / "repro").exists()  # nothing failed: no reproducer
    assert main(["repro", str(tmp_path / "r"), "passes::onnxruntime"]) == 0
    folder = tmp_path / "r" / "repro" / "passes" / "onnxruntime"
    done = run_repro(folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence" in done.stdout
    # --out: a folder of its own; a non-empty one holding other files is refused
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert main(["repro", str(tmp_path / "r"), "passes::onnxruntime", "--out",
                 str(tmp_path / "mine")]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert main(["repro", str(tmp_path / "r"), "nope::onnxruntime"]) == 2
