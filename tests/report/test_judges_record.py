"""A pair's verdict travels as its judge gave it (harness/judges, issue 55): a dummy judge's
verdict reaches run.json, the report, the reproducer record and a merge unchanged; a known
upstream crash (no rows, its decision kept on the pair) merges; a whole run's run.json and
the merge of its shards have the same keys."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support.runnable import runnable

from harness import compare, judges
from harness.cli import main
from harness.judges import Disagrees, Figures, Measured
from harness.judges.float import FloatJudge

CASE = """
name: {name}
cell: lstm
input_size: 2
hidden_size: 3
batch: 2
seq_len: 3
seed: 4
dtype: float32
"""


@dataclass(frozen=True)
class Score(Figures):
    key: ClassVar[str] = "dummy"
    score: float = 0.0

    def record(self) -> dict[str, Any]:
        return {"score": self.score}

    @classmethod
    def from_record(cls, record: Any) -> Score:
        if not isinstance(record, dict) or "score" not in record:
            raise Disagrees("has no dummy record in run.json")
        return cls(float(record["score"]))

    def worst_text(self, worst, fmt) -> str:
        return f"dummy score {self.score:g}"


class DummyJudge(FloatJudge):
    kind = "dummy"
    figures = Score
    evidence = "dummy record"

    def claims(self, case, adapter) -> bool:
        return case.name == "dummy"

    def measure(self, prep, adapter, out) -> Measured:
        m = super().measure(prep, adapter, out)
        return Measured(m.rows, m.tolerance, Score(0.75), "the dummy judged it", m.passed)

    def plain(self, rows, case, adapter, figures) -> tuple[str, str]:
        return (compare.DIVERGED if figures.score > 0.5 else compare.PASS,
                f"score {figures.score:g} over 0.5")


def _run(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def _pair(folder: Path, adapter: str) -> dict:
    return next(p for p in _run(folder)["pairs"] if p["adapter"] == adapter)


def test_a_dummy_judges_verdict_reaches_run_report_repro_and_merge(tmp_path, monkeypatch):
    monkeypatch.setattr(judges, "JUDGES", list(judges.JUDGES))
    judges.register(DummyJudge())
    (tmp_path / "d.yaml").write_text(CASE.format(name="dummy"))
    shard = tmp_path / "s1"
    assert main(["run", str(tmp_path / "d.yaml"), "--out", str(shard), "--quiet", "--plots",
                 "none", "--shard", "1/1", "--jobs", "1",
                 "--adapters", "reference,noise-floor"]) == 1
    pair = _pair(shard, "noise-floor")
    assert pair["status"] == "DIVERGED" and pair["dummy"] == {"score": 0.75}
    assert pair["reason"] == "the dummy judged it; score 0.75 over 0.5"
    assert "dummy score 0.75" in (shard / "summary.md").read_text()
    readme = (shard / "repro" / "dummy" / "noise-floor" / "README.md").read_text()
    assert "DIVERGED" in readme or "diverges" in readme, readme
    assert main(["merge", str(tmp_path / "m"), str(shard), "--plots", "none"]) == 1
    assert _pair(tmp_path / "m", "noise-floor") == pair
    assert "dummy score 0.75" in (tmp_path / "m" / "summary.md").read_text()
    # the figures are the judge's evidence: changed, the merge refuses the shard
    doc = _run(shard)
    doc["pairs"][[p["adapter"] for p in doc["pairs"]].index("noise-floor")]["dummy"] = {
        "score": 0.25}
    (shard / "run.json").write_text(json.dumps(doc))
    assert main(["merge", str(tmp_path / "m2"), str(shard)]) == 2


@pytest.fixture(scope="module")
def whole_and_merged(tmp_path_factory) -> tuple[Path, Path]:
    """One whole run of the cheapest adapters (the harness's references and torch-cpu, with a
    registry entry planted for noise-floor on case ``a``: a "looks fixed" pair and a checked
    one) on two tiny cases, the same run in two shards (``--shard``), and their merge. In the
    test process (``--jobs 1``): a worker process would cost more than the pairs."""
    from harness import known_bugs

    runnable("torch-cpu")
    root = tmp_path_factory.mktemp("keys")
    (root / "cases").mkdir()
    for name in ("a", "b"):
        (root / "cases" / f"{name}.yaml").write_text(CASE.format(name=name))
    planted = known_bugs.KnownBug(adapter="noise-floor", upstream="example/fw#7",
                                  summary="planted", since={"numpy": "1.0"},
                                  on_case=lambda case: case.name == "a")
    run = ["run", str(root / "cases"), "--quiet", "--plots", "none", "--jobs", "1",
           "--adapters", "reference,noise-floor,torch-cpu"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(known_bugs, "KNOWN_BUGS", (planted,))
        assert main([*run, "--out", str(root / "whole")]) == 1  # looks fixed fails
        codes = [main([*run, "--out", str(root / f"s{k}"), "--shard", f"{k}/2"])
                 for k in (1, 2)]
        assert sorted(codes) == [0, 1]
        assert main(["merge", str(root / "m"), str(root / "s1"), str(root / "s2")]) == 1
    return root / "whole", root / "m"


BOOKKEEPING = {"shards", "shard_runs", "shard_of", "missing_shards", "shard", "shard_pairs"}


def test_a_whole_runs_record_and_its_merge_have_the_same_keys(whole_and_merged):
    whole, merged = map(_run, whole_and_merged)
    assert set(whole) - BOOKKEEPING == set(merged) - BOOKKEEPING
    assert [set(p) for p in whole["pairs"]] == [set(p) for p in merged["pairs"]]
    assert len(whole["pairs"]) == 6
    decisions = {p["case"]: p["known_bug"] for p in merged["pairs"]
                 if p["adapter"] == "noise-floor"}
    assert decisions == {"a": {"upstream": "example/fw#7", "source": "registry"},
                         "b": {"checked": ["example/fw#7"], "applies": False}}


def test_a_known_upstream_crash_merges(tmp_path, monkeypatch):
    """A pair its adapter declares a known upstream crash has no rows: its decision, kept on
    the pair, is what merge checks (the registry's entry on the case), not its rows."""
    from harness import known_bugs
    from harness.adapters.reference import NoiseFloor
    from harness.errors import KnownUpstreamCrash

    entry = known_bugs.KnownBug(adapter="noise-floor", upstream="example/crash#1",
                                summary="dies", since={}, crash="SIGSEGV")
    monkeypatch.setattr(known_bugs, "KNOWN_BUGS", (*known_bugs.KNOWN_BUGS, entry))

    def crash(self, case, canonical, inputs, **kwargs):
        raise KnownUpstreamCrash("the converter died with SIGSEGV", "example/crash#1")

    monkeypatch.setattr(NoiseFloor, "run", crash)
    monkeypatch.setattr("harness.pairs._prepared", lambda prep, adapter: None)
    (tmp_path / "c.yaml").write_text(CASE.format(name="c"))
    shard = tmp_path / "s1"
    main(["run", str(tmp_path / "c.yaml"), "--out", str(shard), "--quiet", "--plots", "none",
          "--shard", "1/1", "--jobs", "1", "--adapters", "noise-floor"])
    pair = _pair(shard, "noise-floor")
    assert pair["status"] == "known upstream bug", pair
    assert pair["known_bug"] == {"upstream": "example/crash#1", "source": "registry",
                                 "crash": True}
    # merged (exit 1: no framework was compared, as in the run)
    assert main(["merge", str(tmp_path / "m"), str(shard), "--plots", "none"]) == 1
    assert _pair(tmp_path / "m", "noise-floor") == pair
    # a decision the registry does not hold is refused
    doc = _run(shard)
    doc["pairs"][0]["known_bug"]["upstream"] = "example/crash#2"
    (shard / "run.json").write_text(json.dumps(doc))
    assert main(["merge", str(tmp_path / "m2"), str(shard)]) == 2
