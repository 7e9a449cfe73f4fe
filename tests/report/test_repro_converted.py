"""Reproducers of the adapters that run a converted model (harness/repro/render.py, families
``tflite`` and ``executorch``): the script runs the ``.tflite`` / ``.pte`` beside it as the
adapter ran it and reads its outputs with the adapter's own readout (harness/families/readout.py);
a quantized pair's script answers the cost question (SQNR against an ideal quantization's, by
harness.quantization.cost_status's rule) instead of the float32 tolerance.

The default tests render a script from a record made by hand and run it in this process with
a stand-in for the LiteRT interpreter that returns the harness's float64 reference (computed
independently of the script's equations), changed where the test says: no framework, well
under a second. The ``roads`` tests convert real models, write the reproducers of real failing
pairs and run them in a fresh process where rnn-harness cannot be imported.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from support.repro_run import first_line, run_repro
from support.runnable import runnable

from harness import compare, quantization, runner
from harness.adapters import get_adapter
from harness.cases import load_cases
from harness.families import readout
from harness.handed import Handed
from harness.judges import CostFigures
from harness.judges.verdict import ScriptQuestion
from harness.pairs import reproduce
from harness.prepare import prepare
from harness.report import write_report
from harness.repro.record import ReproRecord, script_spec
from harness.repro.write import safe_name, write_one
from harness.spec import Case

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, dtype="float32")


# A hand-built record, run with a stand-in interpreter ------------------------------------------

def _record(case: Case, quantized: ScriptQuestion | None = None) -> tuple[ReproRecord, np.ndarray]:
    """A deployed one-layer model's record (its one output ``y``, h_n read from it) and the
    float64 reference y the stand-in returns."""
    prep = prepare(case)
    x = np.asarray(prep.inputs.x, np.float32)
    handed = Handed("tflite", {
        "framework": "litert", "runner": "signature", "inputs": ["x"],
        "roles": {"deployed_y": "y"}, "op_resolver": "BUILTIN_REF" if quantized else None,
        "h_n": "from_y", "absent": {"c_n": "a deployed model outputs y only"},
        "scheme": "int8" if quantized else None},
        arrays={"feed/x": x}, files={"model.tflite": b"TFL3 stand-in"})
    record = ReproRecord(
        case=case.name, adapter="litert-int8-ref" if quantized else "litert-fused",
        title="LiteRT", status=compare.DIVERGED, reason="", spec=script_spec(case),
        atol=1e-5, rtol=1e-5,
        canonical={k: np.asarray(v, np.float64) for k, v in prep.canonical.tensors.items()},
        inputs={"x": np.asarray(prep.inputs.x, np.float64),
                "h0": np.asarray(prep.inputs.h0, np.float64),
                "c0": np.asarray(prep.inputs.c0, np.float64),
                "lengths": np.asarray(prep.inputs.lengths, np.int64)},
        reference={}, handed=handed, question=quantized or ScriptQuestion())
    return record, np.asarray(prep.reference.y, np.float64)


def _stand_in(monkeypatch, y: np.ndarray, seen: dict) -> None:
    """``ai_edge_litert.interpreter`` whose Interpreter's one signature returns ``y``, noting
    what it was given."""
    class Interpreter:
        def __init__(self, model_content, **kwargs):
            seen["model"], seen["kwargs"] = model_content, kwargs

        def get_signature_runner(self):
            def run(**feeds):
                seen["feeds"] = feeds
                return {"deployed_y": y.astype(np.float32)}
            return run

    module = types.ModuleType("ai_edge_litert.interpreter")
    module.Interpreter = Interpreter
    module.OpResolverType = types.SimpleNamespace(BUILTIN_REF="BUILTIN_REF-enum")
    monkeypatch.setitem(sys.modules, "ai_edge_litert", types.ModuleType("ai_edge_litert"))
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", module)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "stand-in")


def _run_script(folder: Path) -> int:
    text = (folder / "repro.py").read_text()
    assert not re.search(r"^\s*(import|from)\s+harness\b", text, re.M)
    namespace = {"__name__": "repro", "__file__": str(folder / "repro.py")}
    exec(compile(text, str(folder / "repro.py"), "exec"), namespace)
    return namespace["main"]()


def test_a_tflite_script_runs_the_model_and_reads_it_as_the_adapter(tmp_path, monkeypatch,
                                                                    capsys):
    case = Case(name="bi", cell="lstm", bidirectional=True, seed=4, **TINY)
    record, y = _record(case)
    folder = write_one(tmp_path, record)
    assert (folder / "model.tflite").read_bytes() == b"TFL3 stand-in"
    seen: dict = {}
    _stand_in(monkeypatch, y, seen)
    assert _run_script(folder) == 0
    out = capsys.readouterr().out
    assert seen["model"] == b"TFL3 stand-in" and seen["kwargs"] == {}
    np.testing.assert_array_equal(seen["feeds"]["x"], record.handed.arrays["feed/x"])
    assert "no divergence" in out and "c_n not compared: a deployed model outputs y only" in out
    assert "h_n layer 0 direction 1" in out  # read from y, as the adapter reads it
    # the backward direction wrong from its last step in input time order (its first read)
    bad = y.copy()
    bad[:, -1, 3:] += 1e-3
    _stand_in(monkeypatch, bad, seen)
    assert _run_script(folder) == 1
    out = capsys.readouterr().out
    assert "first diverging: y layer 0 direction 1 t=3" in out
    readme = (folder / "README.md").read_text()
    assert "`model.tflite` is the converted model" in readme
    assert "https://github.com/google-ai-edge/LiteRT/issues" in readme


@pytest.mark.parametrize(("noise", "verdict"), [(0.2, compare.DIVERGED), (0.002, compare.PASS)])
def test_a_quantized_script_answers_the_cost_question_by_the_runs_rule(
        tmp_path, monkeypatch, capsys, noise, verdict):
    """Its exit status is cost_status's verdict on the SQNR of what the model returned; the
    float32 tolerance (which any int8 model misses) is not what it judges."""
    case = Case(name="q", cell="lstm", seed=5, quantization={"calibration_batches": 2,
                                                             "min_sqnr_db": 10}, **TINY)
    y_ref = np.asarray(prepare(case).reference.y, np.float64)
    rng = np.random.default_rng(0)
    y = y_ref + noise * np.abs(y_ref).mean() * rng.standard_normal(y_ref.shape)
    y32 = y.astype(np.float32).astype(np.float64)
    total = float(quantization.sqnr_db(y32, y_ref))
    ideal = 30.0
    expected, _ = quantization.cost_status(case, compare.PASS, total, ideal)
    assert expected == verdict  # both answers are exercised
    cost = CostFigures.from_record({"sqnr_db": round(total, 4),
                                    "ideal_sqnr_db": ideal}).script(case)
    assert cost.key == "cost"
    assert cost.data["margin_db"] == quantization.IDEAL_MARGIN_DB
    assert cost.data["min_sqnr_db"] == 10
    record, _ = _record(case, cost)
    folder = write_one(tmp_path, record)
    seen: dict = {}
    _stand_in(monkeypatch, y, seen)
    code = _run_script(folder)
    out = capsys.readouterr().out
    assert seen["kwargs"] == {"experimental_op_resolver_type": "BUILTIN_REF-enum"}
    assert code == (1 if expected == compare.DIVERGED else 0), out
    assert f"SQNR over y: {total:.2f} dB" in out
    assert "tolerance" not in out.split("SQNR over y")[0].split("expected:")[1]
    if code:
        assert "first diverging: y layer 0 direction 0 t=" in out
        assert "more than an ideal quantization" in out
    text = (folder / "repro.py").read_text()
    assert "IDEAL_MARGIN_DB" in text and "stays the harness's" in text
    readme = (folder / "README.md").read_text()
    assert "cost question" in readme and "stays the harness's question" in readme


def test_the_readout_maps_roles_as_the_adapters_name_them():
    a = np.arange(24.0).reshape(2, 4, 3)
    ys, h_n, c_n = readout.readout({"Identity": a, "Identity_1": a[:, 0], "Identity_2": a[:, 1]},
                                   {"Identity": "y_0", "Identity_1": "h_n_0",
                                    "Identity_2": "c_n_0"}, 1)
    assert list(ys) == [0] and h_n.shape == (1, 2, 3) and c_n.shape == (1, 2, 3)
    ys, h_n, c_n = readout.readout({"0": a, "1": a[None, :, 0]}, {"0": "y", "1": "h_n"}, 2)
    assert list(ys) == [1] and h_n.shape == (1, 2, 3) and c_n is None
    two = np.concatenate([a, -a], axis=-1)
    h = readout.h_n_from_y(two, [0, 1], 3)
    np.testing.assert_array_equal(h[0], a[:, -1])
    np.testing.assert_array_equal(h[1], -a[:, 0])


# Real conversions (roads) ------------------------------------------------------------------------

def _report(cases: list[Case], adapters: list[str], out: Path):
    result = runner.run(cases, [get_adapter(a) for a in adapters])
    write_report(result, out)
    return {(p.case, p.adapter): p for p in result.pairs}


def _swapped_rows(real):
    """``_run`` with the i and f gate rows of nn.LSTM's weight_ih_l0 swapped in what the
    adapter hands the framework (a planted fault)."""
    def swapped(self, case, native, inputs):
        native, H = dict(native), case.hidden_size
        w = native["weight_ih_l0"].copy()
        w[:H], w[H:2 * H] = native["weight_ih_l0"][H:2 * H], native["weight_ih_l0"][:H]
        native["weight_ih_l0"] = w
        return real(self, case, native, inputs)
    return swapped


@pytest.mark.roads  # an export and a lowering
@pytest.mark.torch
def test_executorch_program_of_a_planted_fault_reproduces(tmp_path, monkeypatch):
    """On cases/export-length.yaml executorch is the known bug #8468, whose export fails: no
    program, so its folder is a README saying so. A fault planted in the weights it hands
    torch.export is in the program, and the reproducer runs that program."""
    adapter = runnable("executorch")
    [export_length] = load_cases(ROOT / "cases" / "export-length.yaml")
    pairs = _report([export_length], ["reference", "executorch"], tmp_path / "known")
    assert pairs[("export-length", "executorch")].status == compare.KNOWN_BUG
    known = tmp_path / "known" / "repro" / "export-length" / "executorch"
    assert sorted(p.name for p in known.iterdir()) == ["README.md"]
    assert "pytorch/executorch#8468" in (known / "README.md").read_text()

    monkeypatch.setattr(type(adapter), "_run", _swapped_rows(type(adapter)._run))
    case = Case(name="swap", cell="lstm", seed=9, initial_state="random", **TINY)
    pair = _report([case], ["reference", "executorch"], tmp_path / "r")[("swap", "executorch")]
    assert pair.status == compare.DIVERGED
    monkeypatch.undo()
    folder = tmp_path / "r" / "repro" / "swap" / "executorch"
    assert (folder / "model.pte").stat().st_size > 0
    done = run_repro(folder, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.roads  # two compiles, one in the script
@pytest.mark.torch
def test_torch_compile_planted_fault_reproduces_compiled(tmp_path, monkeypatch):
    """torch-compile's reproducer compiles the module as the adapter did (allow_rnn,
    Inductor), and a fault planted in the weights it hands the module reproduces there."""
    adapter = runnable("torch-compile")
    monkeypatch.setattr(type(adapter), "_run", _swapped_rows(type(adapter)._run))
    case = Case(name="swap", cell="lstm", seed=9, initial_state="random", **TINY)
    pair = _report([case], ["reference", "torch-compile"], tmp_path / "r")[
        ("swap", "torch-compile")]
    assert pair.status == compare.DIVERGED, pair.reason
    monkeypatch.undo()
    folder = tmp_path / "r" / "repro" / "swap" / "torch-compile"
    done = run_repro(folder, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "device: cpu, torch.compile (Inductor)" in done.stdout
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.roads  # a refused conversion, then one at the fixed length
@pytest.mark.torch
@pytest.mark.litert
def test_litert_torch_fixed_length_model_reproduces_1062(tmp_path):
    """#1062: converted at export_seq_len 4, the fixed-shape model run at 6 steps returns 4.
    The known-bug row keeps the model the adapter ran; its script runs it at 6 steps and
    names the first step it lacks."""
    runnable("litert-torch")
    case = Case(name="longer", cell="gru", seed=31, initial_state="random",
                **(TINY | {"seq_len": 6}), export_seq_len=4)
    pair = _report([case], ["reference", "litert-torch"], tmp_path / "r")[
        ("longer", "litert-torch")]
    assert pair.status == compare.KNOWN_BUG, pair.reason
    assert "google-ai-edge/litert-torch#1062" in pair.reason
    folder = tmp_path / "r" / "repro" / "longer" / "litert-torch"
    assert (folder / "model.tflite").stat().st_size > 0
    done = run_repro(folder, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the framework returned shape [2, 4, 3], the equations [2, 6, 3]" in done.stdout
    assert "first diverging: y layer 0 direction 0 t=4" in done.stdout
    assert "google-ai-edge/litert-torch#1062" in (folder / "README.md").read_text()


@pytest.mark.roads  # a full-integer conversion in a process of its own
@pytest.mark.litert
def test_int8_bidirectional_lstm_cost_reproduces(tmp_path):
    """cases-quantized's bidirectional LSTM diverges under litert-int8 by its cost (SQNR far
    below an ideal int8 quantization's), a finding the case declares (its ``expected:`` entry,
    docs/findings/tflite-bidirectional-int8-grids/): the script, run where rnn-harness is not,
    measures the same SQNR from the model and exits 1."""
    runnable("litert-int8")
    [case] = [c for c in load_cases(ROOT / "cases-quantized" / "quantized.yaml")
              if c.cell_kind.has_cell_state and c.num_directions == 2]
    pair = _report([case], ["reference", "litert-int8"], tmp_path / "r")[
        (case.name, "litert-int8")]
    assert pair.status == compare.KNOWN_BUG, pair.reason
    assert "docs/findings/tflite-bidirectional-int8-grids/" in pair.reason, pair.reason
    status, _ = quantization.cost_status(case, compare.PASS, pair.figures.record()["sqnr_db"],
                                         pair.figures.record()["ideal_sqnr_db"])
    assert status == compare.DIVERGED  # the cost question's own verdict
    folder = tmp_path / "r" / "repro" / safe_name(case.name) / "litert-int8"
    done = run_repro(folder, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    said = re.search(r"SQNR over y: (-?[0-9.]+) dB", done.stdout)
    assert said and abs(float(said.group(1)) - pair.figures.record()["sqnr_db"]) < 0.01, done.stdout
    assert "first diverging: y layer 0 direction" in done.stdout
    assert "more than an ideal quantization" in done.stdout


@pytest.mark.roads  # a conversion
@pytest.mark.litert
def test_a_passing_litert_fused_pair_reproduces_nothing(tmp_path):
    runnable("litert-fused")
    case = Case(name="fused", cell="lstm", seed=6, initial_state="random", **TINY)
    prep = prepare(case)
    record = reproduce(prep, get_adapter("litert-fused"))
    assert record.status == compare.PASS, record.reason
    done = run_repro(write_one(tmp_path, record), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence" in done.stdout and "h_n layer 0 direction 0" in done.stdout
