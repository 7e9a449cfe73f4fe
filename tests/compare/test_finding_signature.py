"""A finding declared with its signature (issue 59, item 3): ``expected.ADAPTER.signature``
(``first_step``, ``says``) is checked on the pair's rows and reason, so that a pair diverging
otherwise than the declared finding stays DIVERGED and fails the run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import compare
from harness.cli import main
from harness.judges import known
from harness.spec import Case

ROOT = Path(__file__).resolve().parents[2]
GRIDS = ("op 4 UNIDIRECTIONAL_SEQUENCE_LSTM writes h on scale 0.003162 zero point 3, reads it "
         "back on scale 0.0026093 zero point 1")
REASON = f"int8: within 15 output steps; the converter declared two grids: {GRIDS}; c_n not"


def _case(**signature) -> Case:
    return Case(name="c", cell="lstm", input_size=3, hidden_size=4, seq_len=6, expected={
        "noise-floor": {"verdict": "DIVERGED", "upstream": "docs/findings/x/README.md",
                        "signature": signature}})


def _rows(first_t: int) -> pd.DataFrame:
    """y rows of one layer and direction, beyond tolerance from step ``first_t`` on."""
    return pd.DataFrame([{"mode": compare.FREE, "output": "y", "layer": 0, "direction": 0,
                          "t": t, "verdict": compare.DIVERGED if t >= first_t else compare.PASS}
                         for t in range(6)])


def _status(case: Case, rows: pd.DataFrame, reason: str) -> tuple[str, str]:
    reading = known.decide(compare.DIVERGED, case, "noise-floor", None, None, rows, reason)
    return known.apply(compare.DIVERGED, reason, case, "noise-floor", reading)


def test_a_divergence_with_the_declared_signature_is_the_known_finding():
    status, reason = _status(_case(first_step=0, says=[GRIDS]), _rows(0), REASON)
    assert status == compare.KNOWN_BUG
    assert reason.startswith("known upstream bug docs/findings/x/README.md")


@pytest.mark.parametrize("rows, said, wrong", [
    (_rows(1), REASON, "first diverging step is t=0, but it first diverges at y L0 d0 t=1"),
    (_rows(6), REASON, "first diverging step is t=0, but no row diverges"),
    (_rows(0), REASON.replace("0.0026093", "0.0026094"), "reason does not say 'op 4 UNIDIR"),
    (_rows(0), REASON.replace("op 4", "op 5"), "reason does not say 'op 4 UNIDIR"),
], ids=["later-first-step", "no-divergence", "a-scale-moved", "another-op"])
def test_any_change_of_the_signature_leaves_the_pair_diverged(rows, said, wrong):
    status, reason = _status(_case(first_step=0, says=[GRIDS]), rows, said)
    assert status == compare.DIVERGED
    assert "applies here but does not explain the divergence" in reason and wrong in reason


def test_a_pair_without_a_signature_is_the_known_bug_whatever_its_rows():
    case = Case(name="c", cell="lstm", input_size=3, hidden_size=4, seq_len=6, expected={
        "noise-floor": {"verdict": "DIVERGED", "upstream": "example/fw#1"}})
    assert _status(case, _rows(3), "")[0] == compare.KNOWN_BUG


def _run(tmp_path: Path, signature: str) -> tuple[int, dict]:
    case = tmp_path / "sig.yaml"
    # noise-floor computes in float32: with a zero tolerance it diverges from the first step
    case.write_text("name: sig\ncell: lstm\ninput_size: 3\nhidden_size: 4\nseq_len: 6\n"
                    "tolerance: {adapters: {noise-floor: {atol: 0, rtol: 0}}}\n"
                    "expected: {noise-floor: {verdict: DIVERGED, upstream: example/fw#1, "
                    f"signature: {signature}}}}}\n")
    out = tmp_path / "out"
    code = main(["run", str(case), "--adapters", "reference,noise-floor", "--out", str(out),
                 "--quiet"])
    pairs = json.loads((out / "run.json").read_text())["pairs"] if out.exists() else []
    return code, next((p for p in pairs if p["adapter"] == "noise-floor"), {})


def test_the_run_checks_the_signature_on_the_pairs_rows(tmp_path):
    code, pair = _run(tmp_path, "{first_step: 0}")
    assert (code, pair["status"]) == (0, compare.KNOWN_BUG)
    code, pair = _run(tmp_path, "{first_step: 2}")
    assert (code, pair["status"]) == (1, compare.DIVERGED)
    assert "signature's first diverging step is t=2" in pair["reason"]


def test_an_empty_signature_is_a_case_error(tmp_path, capsys):
    code, _ = _run(tmp_path, "{}")
    err = capsys.readouterr().err
    assert code == 2 and "signature" in err and "first_step, says or both" in err


@pytest.mark.roads
@pytest.mark.parametrize("file, adapter, change", [
    ("quantized-gru-reset-before.yaml", "openvino-nncf-int8", ("first_step: 0", "first_step: 1")),
    ("quantized.yaml", "litert-int8", ("0.0026093", "0.0026094")),
])
def test_the_bundled_findings_hold_and_a_changed_signature_fails(tmp_path, file, adapter,
                                                                 change):
    def run(path: Path) -> tuple[int, list[dict]]:
        out = tmp_path / f"out-{path.parent.name}"
        code = main(["run", str(path), "--adapters", f"reference,{adapter}", "--out", str(out),
                     "--quiet"])
        pairs = json.loads((out / "run.json").read_text())["pairs"]
        return code, [p for p in pairs if p["adapter"] == adapter
                      and p["status"] in compare.COMPARED]

    code, pairs = run(ROOT / "cases-quantized" / file)
    declared = [p for p in pairs if p.get("known_bug", {}).get("source") == "expected"]
    assert code == 0
    assert len(declared) == (2 if adapter.startswith("openvino") else 1)  # matrix entries
    assert {p["status"] for p in declared} == {compare.KNOWN_BUG}
    changed = tmp_path / "changed" / file
    changed.parent.mkdir()
    shutil.copy(ROOT / "cases-quantized" / file, changed)
    text = changed.read_text()
    assert change[0] in text
    changed.write_text(text.replace(change[0], change[1]))
    code, pairs = run(changed)
    assert code == 1
    assert compare.DIVERGED in {p["status"] for p in pairs}
