"""``merge`` of a quantized pair's shard edited after it ran (issue 53.5).

A quantized pair's status is derived again from its rows: the SQNR over y from the rows' cost
columns (harness.quantization.sqnr_of_rows), which run.json's SQNR record must agree with, and
a pair whose case has ``quantization:`` is judged as quantized whatever its columns say. One
honest shard (torch-dynamic-int8, DIVERGED only by its case's SQNR floor) is run once and
edited as an attacker would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.cli import main

# SQNR ~47 dB over y: DIVERGED by the floor alone, the kernel within its steps
CASE = """
name: q
cell: lstm
input_size: 2
hidden_size: 3
batch: 2
seq_len: 4
seed: 5
quantization: {calibration_batches: 2, min_sqnr_db: 80}
adapters: [reference, torch-dynamic-int8]
"""
PAIR = ("q", "torch-dynamic-int8")


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("quantized")
    (root / "q.yaml").write_text(CASE)
    assert main(["run", str(root / "q.yaml"), "--out", str(root / "s1"), "--quiet",
                 "--plots", "none", "--shard", "1/1", "--adapters",
                 "reference,torch-dynamic-int8"]) == 1
    return root / "s1"


def _shard(honest: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(honest, tmp_path / "s1"))


def _pair(shard: Path) -> dict:
    return next(p for p in json.loads((shard / "run.json").read_text())["pairs"]
                if (p["case"], p["adapter"]) == PAIR)


def _edit_pair(shard: Path, **changes) -> None:
    doc = json.loads((shard / "run.json").read_text())
    for p in doc["pairs"]:
        if (p["case"], p["adapter"]) == PAIR:
            p.update(changes)
    (shard / "run.json").write_text(json.dumps(doc))


def _merge_error(shard: Path, tmp_path: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["merge", str(tmp_path / "merged"), str(shard)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert not (tmp_path / "merged").exists()
    return err[0]


def test_the_honest_quantized_shard_merges_with_its_status(honest, tmp_path):
    pair = _pair(honest)
    assert pair["status"] == "DIVERGED" and "below the case's min_sqnr_db 80" in pair["reason"]
    assert main(["merge", str(tmp_path / "merged"), str(honest), "--plots", "none"]) == 1
    assert _pair(tmp_path / "merged")["status"] == "DIVERGED"


def test_a_forged_sqnr_record_is_refused(honest, tmp_path, capsys):
    """Status pass with the SQNR over y and the ideal's at 250 dB: the rows give ~47 dB."""
    shard = _shard(honest, tmp_path)
    real = _pair(shard)["quantization"]["sqnr_db"]
    _edit_pair(shard, status="pass", quantization={"sqnr_db": 250.0, "ideal_sqnr_db": 250.0})
    err = _merge_error(shard, tmp_path, capsys)
    assert err.startswith(f"rnn-harness: error: {shard / 'run.json'}: pairs: pair "
                          f"q::torch-dynamic-int8 has an SQNR over y of 250 dB in run.json, but "
                          f"its divergence.csv rows give {real:.4g} dB: the shard was changed "
                          "after it ran"), err


def test_blanked_cost_columns_do_not_make_a_float_pair(honest, tmp_path, capsys):
    """Blank sqnr_db, cosine and rmse_steps and status pass: the case has quantization:, so
    the pair is judged as quantized, and its y rows have no cost columns."""
    shard = _shard(honest, tmp_path)
    csv = shard / "divergence.csv"
    text = pd.read_csv(csv, dtype=str, keep_default_na=False)
    text[["sqnr_db", "cosine", "rmse_steps"]] = ""
    text.to_csv(csv, index=False)
    _edit_pair(shard, status="pass")
    err = _merge_error(shard, tmp_path, capsys)
    assert err.startswith(f"rnn-harness: error: {shard / 'run.json'}: pairs: pair "
                          "q::torch-dynamic-int8 is a quantized pair (its case has "
                          "quantization:), but 4 of its y rows in divergence.csv have no SQNR "
                          "and RMSE"), err


def test_the_sqnr_over_y_is_given_again_by_the_rows_cost_columns():
    """sqnr_of_rows on rows written as divergence.csv writes them (6 significant digits) is the
    SQNR over all of y within SQNR_READ_BACK_DB: padded steps (no signal, no error) count for
    nothing; a step without error but with a signal leaves a lower bound."""
    import numpy as np

    from harness import quantization
    from harness.spec import Case

    case = Case(name="c", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=5,
                bidirectional=True)
    rng = np.random.default_rng(0)
    r = rng.normal(size=(2, 5, 2 * 3))
    y = r + rng.normal(scale=0.01, size=r.shape)
    y[:, 4], r[:, 4] = 0.0, 0.0  # a padded step: 0/0
    checked = 0
    for exact_step in (None, 2):
        if exact_step is not None:
            y[:, exact_step] = r[:, exact_step]
        cost = quantization.cost_columns(case, y, r, step=0.004)
        rows = pd.DataFrame({"output": "y", **{k: [float(f"{v:.6g}") for v in cost[k]]
                                               for k in quantization.COST_COLUMNS}})
        given = quantization.sqnr_of_rows(rows)
        total = float(quantization.sqnr_db(y, r))
        assert given.missing == 0 and given.exact == (exact_step is None)
        if given.exact:
            assert abs(given.db - total) < quantization.SQNR_READ_BACK_DB / 10, (given, total)
            assert given.allows(round(total, 4)) and not given.allows(total + 1)
        else:
            assert given.db < total and given.allows(round(total, 4))
            assert not given.allows(given.db - 1)
        checked += 1
    assert checked == 2
    rows["rmse_steps"] = np.nan  # blanked
    assert quantization.sqnr_of_rows(rows).missing == len(rows) == 10
