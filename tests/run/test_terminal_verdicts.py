"""The terminal path of a run (harness.progress: the default display and ``--verbose``) with
every kind of verdict, including those that rest on no diverging row: a quantized pair DIVERGED
by its ``min_sqnr_db`` floor alone, and a known upstream crash, which has no outputs at all.
Then ``rnn-harness run`` as a user runs it, with stderr on a pseudo-terminal."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from support.terminal import harness_on_a_terminal

from harness import compare, progress
from harness.judges import CostFigures, Verdict
from harness.results import PairResult
from harness.run_events import CaseFailed, PairFinished, PairStarted, RunEnded, RunStarted


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _rows(adapter: str, beyond: bool) -> pd.DataFrame:
    """Two y rows of a pair, the second ``beyond`` tolerance or not."""
    ratios = [0.2, 40.0 if beyond else 0.5]
    return pd.DataFrame([
        {"case": "c", "adapter": adapter, "mode": compare.FREE, "output": "y", "layer": 0,
         "direction": 0, "t": t, "max_abs": r * 1e-5, "max_rel": r * 1e-5, "mean_abs": 1e-6,
         "max_ulp": 1.0, "tol_ratio": r, "atol": 1e-5, "rtol": 1e-5, "noise_floor": 1e-7,
         "floor_ratio": r * 100, "sqnr_db": float("nan"), "cosine": float("nan"),
         "rmse_steps": float("nan"), "verdict": compare.DIVERGED if r > 1 else compare.PASS}
        for t, r in enumerate(ratios)], columns=compare.COLUMNS)


FLOOR = ("dynamic: within 0.3 output steps of the integer-aware reference (pass within 2); "
         "SQNR 39.6 dB over y; SQNR 39.6 dB below the case's min_sqnr_db 200")
CRASH = ("known upstream bug tensorflow#87468: the converter's process was killed by SIGSEGV "
         "converting a GRU to full integer")
# adapter -> (the pair, what its line on the terminal says; None: no line of its own there)
KINDS = {
    "pass": (PairResult("c", "pass", compare.PASS, rows=_rows("pass", False)), None),
    "diverged": (PairResult("c", "diverged", compare.DIVERGED, rows=_rows("diverged", True)),
                 "DIVERGED first at y L0 d0 t=1: max_abs 4.00e-04 (40x tolerance)"),
    "floor-alone": (PairResult("c", "floor-alone", compare.DIVERGED, FLOOR,
                               rows=_rows("floor-alone", False),
                               verdict=Verdict("quantized", compare.DIVERGED, FLOOR,
                                               figures=CostFigures(39.6, 40.6))),
                    f"DIVERGED: {FLOOR}"),
    "known-bug": (PairResult("c", "known-bug", compare.KNOWN_BUG, "known upstream bug x#1",
                             rows=_rows("known-bug", True)), None),
    "known-crash": (PairResult("c", "known-crash", compare.KNOWN_BUG, CRASH), None),
    "looks-fixed": (PairResult("c", "looks-fixed", compare.LOOKS_FIXED,
                               "expected DIVERGED (known upstream bug x#1) but passes",
                               rows=_rows("looks-fixed", False)),
                    "looks fixed: expected DIVERGED (known upstream bug x#1) but passes"),
    "not-applicable": (PairResult("c", "not-applicable", compare.NOT_APPLICABLE,
                                  "quantized adapters run quantized cases only"), None),
    "unavailable": (PairResult("c", "unavailable", compare.UNAVAILABLE, "no module named x"),
                    None),
    "error": (PairResult("c", "error", compare.ERROR, "RuntimeError: boom"),
              "error: RuntimeError: boom"),
    # a vacuous run's pairs: the reference itself and the noise floor, passing by construction
    "reference": (PairResult("c", "reference", compare.BASELINE), None),
    "noise-floor": (PairResult("c", "noise-floor", compare.PASS, rows=_rows("noise-floor", False)),
                    None),
}


def _events() -> list:
    events: list = [RunStarted(len(KINDS) + 2)]
    for name, (pair, _) in KINDS.items():
        events += [PairStarted("c", name), PairFinished(pair)]
    return events + [CaseFailed("broken", "weights file not found", ("reference", "x")),
                     RunEnded()]


def test_every_kind_of_verdict_is_described():
    said = {name: progress.describe(pair) for name, (pair, _) in KINDS.items()}
    assert len(said) == 11
    assert said["floor-alone"] == f"DIVERGED: {FLOOR}"
    assert said["known-crash"] == f"known upstream bug: {CRASH}"
    assert said["known-bug"].startswith("known upstream bug: DIVERGED first at y L0 d0 t=1")
    assert said["pass"].startswith("pass  max_abs 5.00e-06 (0.5x tolerance)")
    assert said["not-applicable"] == "not applicable: quantized adapters run quantized cases only"
    assert said["reference"] == "baseline"


@pytest.mark.parametrize("stream", [Terminal, io.StringIO], ids=["terminal", "not-a-terminal"])
def test_the_default_display_keeps_each_pair_that_needs_a_look(stream):
    out = stream()
    display = progress.RunDisplay(out)
    for event in _events():
        display(event)
    text = out.getvalue()
    expected = {name: line for name, (_, line) in KINDS.items() if line}
    assert len(expected) == 4
    for name, line in expected.items():
        assert f"c::{name}  {line}" in text, (name, text)
    assert "broken: error: weights file not found" in text
    for name in set(KINDS) - set(expected):  # passes, baselines, known bugs: the report's
        assert f"c::{name}  " not in text, name


def test_verbose_gives_each_kind_its_line_on_a_terminal():
    out = Terminal()
    listener = progress.RunProgress(progress.StderrProgress(out))
    for event in _events():
        listener(event)
    lines = out.getvalue().replace("\r", "\n").splitlines()
    for name, (pair, _) in KINDS.items():  # a pass's line is cut to the terminal's width
        assert any(f"c::{name}  {progress.describe(pair)[:24]}" in x for x in lines), name
    assert any("[13/13] broken: error: weights file not found" in x for x in lines)


SMALL = """name: small
cell: lstm
input_size: 3
hidden_size: 4
batch: 2
seq_len: 4
seed: 1
"""


FLOOR_CASES = {
    # every output step of ONNX Runtime's dynamic int8 LSTM lies within 2 steps of the
    # integer-aware reference (~40 dB of SQNR over y here): only the case's floor of 200 dB fails
    "floor.yaml": """name: floor
cell: lstm
input_size: 8
hidden_size: 8
batch: 2
seq_len: 8
seed: 43
quantization: {calibration_batches: 8, min_sqnr_db: 200}
""",
    "small.yaml": SMALL,  # not quantized: a quantized adapter is not applicable to it
}


@pytest.mark.onnx
def test_a_pair_diverged_by_its_sqnr_floor_alone_on_a_terminal(tmp_path: Path):
    """Issue 54.1: a quantized pair DIVERGED by its min_sqnr_db floor, with no row beyond
    tolerance, crashed the terminal display (exit 1, a traceback, no report)."""
    pytest.importorskip("onnxruntime")
    for name, text in FLOOR_CASES.items():
        (tmp_path / name).write_text(text)
    code, out, shown = harness_on_a_terminal(
        ["run", "floor.yaml", "small.yaml", "--adapters", "reference,onnxruntime-dynamic-int8",
         "--out", "report", "--plots", "none", "--no-repro"], tmp_path)
    assert "Traceback" not in shown, shown
    assert code == 1, shown
    assert "floor::onnxruntime-dynamic-int8  DIVERGED: " in shown
    assert "below the case's min_sqnr_db 200" in shown
    assert "1 DIVERGED, 2 baseline, 1 not applicable" in out, out
    assert (tmp_path / "report" / "summary.md").is_file()
    assert (tmp_path / "report" / "run.json").is_file()
