"""Reproducers of the ``mlx`` adapter (family ``mlx``) and of Keras 3 on the torch and OpenVINO
backends (``keras3-torch``, ``keras3-openvino``: family ``keras3-backend``).

An MLX script rebuilds one MLX module per layer and direction and runs the stack with the
adapter's own code (harness/families/mlx.py, pasted into it), with the parameters and inputs
the adapter handed MLX. A Keras-backend script sets the adapter's worker environment
(KERAS_BACKEND ...) before importing Keras and builds the stack with keras.ops as
run_keras_ops does.

The default tests render a script from what the adapter would hand its framework
(``Adapter.hand``, which runs nothing) and compile it: no framework. The ``roads`` tests run real
pairs and their reproducers in a fresh process where rnn-harness cannot be imported: a fault
planted in the weights the adapter hands its framework reproduces (exit 1, at the harness's
first diverging step), and a clean pair's reproducer exits 0. The Keras-backend adapters run in
a worker process of their own, so their fault is planted by an adapter class the worker imports
(tests/support/planted_keras3.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.planted_keras3 import SWAPPED
from support.repro_run import first_line, run_repro
from support.runnable import runnable

from harness import compare, runner
from harness.adapters import get_adapter
from harness.families import mlx as mlx_stack
from harness.pairs import reproduce
from harness.params import DIRECTION_NAMES
from harness.prepare import prepare
from harness.report import write_report
from harness.repro.record import make_record
from harness.repro.render import script
from harness.repro.write import write_one
from harness.results import PairResult
from harness.spec import Case

TINY = dict(input_size=2, hidden_size=3, batch=2, seq_len=4, dtype="float32")


def _handed_record(case: Case, adapter_name: str):
    """The pair's record with what the adapter would hand its framework, made without running
    it (the path of a pair its known bug made unavailable)."""
    adapter, prep = get_adapter(adapter_name), prepare(case)
    native = adapter.layout.to_native(prep.canonical, case, adapter.native_dtype(case))
    handed = adapter.hand(case, native, prep.inputs)
    r = PairResult(case=case.name, adapter=adapter.name, status=compare.UNAVAILABLE,
                          reason="not run")
    return make_record(prep, adapter, r, handed), native


def test_an_mlx_script_runs_the_adapters_own_stack_with_what_it_handed(tmp_path):
    case = Case(name="gru-none", cell="gru", seed=3, bidirectional=True, num_layers=2,
                initial_state="none", **TINY)
    record, native = _handed_record(case, "mlx")
    call = record.handed.call
    assert (call["module"], call["initial_state"], call["input_sizes"]) == ("GRU", "omitted",
                                                                            [2, 6])
    assert set(record.handed.arrays) == {f"param/{k}" for k in native} | {"feed/x", "feed/h0"}
    assert mlx_stack.MLX_DIRECTION_NAMES == DIRECTION_NAMES  # the layout's parameter prefixes
    text = script(record)
    compile(text, "repro.py", "exec")
    assert "import mlx.core as mx" in text and mlx_stack.source() in text
    assert "import harness" not in text and "tensorflow" not in text
    folder = write_one(tmp_path, record)
    assert "https://github.com/ml-explore/mlx/issues" in (folder / "README.md").read_text()


@pytest.mark.parametrize("adapter", ["keras3-torch", "keras3-openvino"])
def test_a_keras_backend_script_sets_the_backend_before_importing_keras(adapter):
    case = Case(name="gru-len", cell="gru", seed=3, direction="reverse", num_layers=2,
                seq_lengths=[4, 2], **TINY)
    record, native = _handed_record(case, adapter)
    call = record.handed.call
    assert call["environ"]["KERAS_BACKEND"] == call["backend"] == adapter.split("-")[1]
    assert call["kwargs"]["reset_after"] is True and call["lengths"] is True
    assert set(record.handed.arrays) == ({f"param/{k}" for k in native}
                                         | {"feed/x", "feed/h0", "feed/lengths"})
    text = script(record)
    compile(text, "repro.py", "exec")
    # the environment is set before keras is imported, and TensorFlow is never imported
    assert text.index('os.environ.update(CALL["environ"])') < text.index("import keras")
    assert "import tensorflow" not in text and "import harness" not in text


# Real runs (roads) --------------------------------------------------------------------------------

def _report(cases: list[Case], adapters: list[str], out: Path):
    result = runner.run(cases, [get_adapter(a) for a in adapters])
    write_report(result, out)
    return {(p.case, p.adapter): p for p in result.pairs}


def _swapped_mlx_rows(real):
    """``_run`` with the first two gate blocks of MLX's ``Wx`` swapped in what the adapter
    hands MLX (a planted fault)."""
    def swapped(self, case, native, inputs):
        native, H = dict(native), case.hidden_size
        w = native["Wx"].copy()
        w[:H], w[H:2 * H] = native["Wx"][H:2 * H], native["Wx"][:H]
        native["Wx"] = w
        return real(self, case, native, inputs)
    return swapped


@pytest.mark.roads  # a reproducer in a fresh process importing MLX
@pytest.mark.mlx
def test_mlx_planted_fault_reproduces(tmp_path, monkeypatch):
    adapter = runnable("mlx")
    monkeypatch.setattr(type(adapter), "_run", _swapped_mlx_rows(type(adapter)._run))
    case = Case(name="swap", cell="lstm", seed=9, initial_state="random", **TINY)
    pair = _report([case], ["reference", "mlx"], tmp_path / "r")[("swap", "mlx")]
    assert pair.status == compare.DIVERGED, pair.reason
    monkeypatch.undo()
    done = run_repro(tmp_path / "r" / "repro" / "swap" / "mlx")
    assert done.returncode == 1, done.stdout + done.stderr
    assert first_line(pair.first_diverging) in done.stdout


@pytest.mark.roads  # a reproducer in a fresh process importing MLX
@pytest.mark.mlx
def test_a_passing_mlx_pair_with_the_state_omitted_reproduces_nothing(tmp_path):
    runnable("mlx")
    case = Case(name="none", cell="gru", seed=6, bidirectional=True, num_layers=2,
                initial_state="none", **TINY)
    record = reproduce(prepare(case), get_adapter("mlx"))
    assert record.status == compare.PASS, record.reason
    assert record.handed.call["initial_state"] == "omitted"
    np.testing.assert_array_equal(record.handed.arrays["feed/h0"], 0.0)
    done = run_repro(write_one(tmp_path, record))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence" in done.stdout and "h_n layer 1 direction 1" in done.stdout


@pytest.mark.roads  # two Keras-backend workers and two reproducers importing Keras
@pytest.mark.keras
@pytest.mark.parametrize("adapter", ["keras3-torch", "keras3-openvino"])
def test_keras_backend_planted_fault_reproduces_and_a_clean_pair_does_not(tmp_path, adapter):
    planted = runnable(SWAPPED[adapter]())
    case = Case(name="swap", cell="lstm", seed=9, initial_state="random", **TINY)
    result = runner.run([case], [get_adapter("reference"), planted])
    write_report(result, tmp_path / "r")
    [pair] = [p for p in result.pairs if p.adapter == planted.name]
    assert pair.status == compare.DIVERGED, pair.reason
    done = run_repro(tmp_path / "r" / "repro" / "swap" / planted.name, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"keras_backend {adapter.split('-')[1]}" in done.stdout
    assert first_line(pair.first_diverging) in done.stdout

    record = reproduce(prepare(case), runnable(adapter))
    assert record.status == compare.PASS, record.reason
    done = run_repro(write_one(tmp_path / "clean", record), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no divergence" in done.stdout and "c_n layer 0 direction 0" in done.stdout
