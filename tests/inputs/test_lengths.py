"""Lengths and initial states come from one place (the Inputs of harness.prepare): every CPU
adapter gives the same verdicts whether a case's lengths are in its YAML or in its inputs file;
an inputs file that contradicts the YAML, or holds a name it has no use for, is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness import compare
from harness.adapters import select
from harness.errors import WeightsError
from harness.prepare import load_inputs, prepare
from harness.runner import run
from harness.spec import Case, TensorFile

LENGTHS = [1, 5, 3]


def _case(tmp_path: Path, arrays: dict[str, np.ndarray], **kw) -> Case:
    path = tmp_path / f"inputs-{len(list(tmp_path.iterdir()))}.npz"
    np.savez(path, **arrays)
    return Case(name=kw.pop("name", "lengths"), cell=kw.pop("cell", "lstm"), input_size=3,
                hidden_size=4, batch=3, seq_len=5, dtype="float32",
                inputs=TensorFile(file=str(path)), **kw)


def _x() -> np.ndarray:
    return np.random.default_rng(7).normal(size=(3, 5, 3))


def test_every_cpu_adapter_agrees_whichever_way_the_lengths_are_given(tmp_path):
    """One run of both directions (a framework's set-up paid once, not once a direction)."""
    cases = []
    for direction in ("forward", "bidirectional"):
        cases.append(_case(tmp_path, {"x": _x()}, name=f"yaml-{direction}",
                           seq_lengths=LENGTHS, direction=direction))
        cases.append(_case(tmp_path, {"x": _x(), "seq_lengths": np.array(LENGTHS)},
                           name=f"file-{direction}", direction=direction))
    result = run(cases, select(None, "cpu"))
    assert not result.case_errors
    by = {(p.case, p.adapter): p for p in result.pairs}
    adapters = {p.adapter for p in result.pairs}
    for direction in ("forward", "bidirectional"):
        ran = []
        for a in sorted(adapters):
            yaml_pair, file_pair = by[(f"yaml-{direction}", a)], by[(f"file-{direction}", a)]
            assert yaml_pair.status == file_pair.status, (a, yaml_pair.reason, file_pair.reason)
            assert file_pair.status not in (compare.DIVERGED, compare.ERROR), (a, file_pair.reason)
            if file_pair.status == compare.PASS:
                ran.append(a)
        assert ("onnxruntime" in ran
                or by[(f"file-{direction}", "onnxruntime")].status == compare.UNAVAILABLE)
        assert "torch-cpu" in ran


def test_the_inputs_files_lengths_reach_every_adapter_through_the_prepared_case(tmp_path):
    prep = prepare(_case(tmp_path, {"x": _x(), "seq_lengths": np.array(LENGTHS)}))
    assert prep.case.seq_lengths == LENGTHS
    assert list(prep.inputs.seq_lengths) == LENGTHS
    # the reference masks: padded steps of y are zero
    assert not np.any(prep.reference.y[0, 1:])


def test_lengths_in_the_file_that_contradict_the_yaml_are_refused_in_one_line(tmp_path):
    case = _case(tmp_path, {"x": _x(), "seq_lengths": np.array(LENGTHS)}, seq_lengths=[5, 5, 5])
    with pytest.raises(WeightsError, match="contradicts the case's seq_lengths") as err:
        load_inputs(case)
    assert err.value.field == "seq_lengths" and err.value.file.endswith(".npz")
    assert "\n" not in str(err.value)
    same = _case(tmp_path, {"x": _x(), "seq_lengths": np.array(LENGTHS)}, seq_lengths=LENGTHS)
    assert list(load_inputs(same).seq_lengths) == LENGTHS


@pytest.mark.parametrize("name,meant", [("h_0", "h0"), ("c_O", "c0"), ("H0", "h0"),
                                        ("seq_length", "seq_lengths")])
def test_misspelt_names_in_an_inputs_file_are_refused_with_did_you_mean(tmp_path, name, meant):
    state = np.ones((1, 3, 4))
    with pytest.raises(WeightsError, match=f"unknown tensor \\(did you mean {meant}\\?\\)") as err:
        load_inputs(_case(tmp_path, {"x": _x(), name: state}))
    assert err.value.field == name


def test_c0_for_a_gru_is_refused(tmp_path):
    with pytest.raises(WeightsError, match="a GRU has no cell state") as err:
        load_inputs(_case(tmp_path, {"x": _x(), "c0": np.ones((1, 3, 4))}, cell="gru"))
    assert err.value.field == "c0"
