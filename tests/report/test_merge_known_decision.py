"""merge tells a known-bug decision removed from a pair: the run records on every compared pair
of an adapter the registry holds entries of whether one applied (``known_bug``: the entry, or
``{checked: [...], applies: false}``), and merge refuses such a pair without the record, so that
a "looks fixed" pair cannot be edited into a plain "pass" by dropping its decision. Shards of a
planted registry entry for the noise-floor adapter, which needs no framework."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import compare, known_bugs
from harness.cli import main

CASES = {"hit": "name: hit\ncell: lstm\ninput_size: 2\nhidden_size: 3\nseq_len: 3\n",
         "miss": "name: miss\ncell: gru\ninput_size: 2\nhidden_size: 3\nseq_len: 3\n"}
PLANTED = known_bugs.KnownBug(adapter="noise-floor", upstream="example/fw#7", summary="planted",
                              since={"numpy": "1.0"}, on_case=lambda case: case.name == "hit")


@pytest.fixture
def planted(monkeypatch) -> None:
    monkeypatch.setattr(known_bugs, "KNOWN_BUGS", (PLANTED,))


@pytest.fixture
def shards(planted, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("decisions")
    for name, text in CASES.items():
        (root / f"{name}.yaml").write_text(text)
    folders = {}
    for k in (1, 2):
        folders[f"s{k}"] = root / f"s{k}"
        main(["run", str(root / "hit.yaml"), str(root / "miss.yaml"), "--adapters",
              "reference,noise-floor", "--out", str(folders[f"s{k}"]), "--quiet",
              "--shard", f"{k}/2"])
    return folders


def _pair(shards: dict[str, Path], case: str) -> tuple[Path, dict, dict]:
    """The run.json of the shard holding noise-floor's pair of ``case``, as read, and the pair."""
    found = [(f, doc, p) for f in shards.values()
             for doc in [json.loads((f / "run.json").read_text())] for p in doc["pairs"]
             if (p["case"], p["adapter"]) == (case, "noise-floor")]
    assert len(found) == 1
    return found[0]


def _merge(shards: dict[str, Path], out: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["merge", str(out), *map(str, shards.values())])
    return code, capsys.readouterr().err


def test_the_decision_is_recorded_either_way_and_honest_shards_merge(shards, tmp_path, capsys):
    _, _, hit = _pair(shards, "hit")
    _, _, miss = _pair(shards, "miss")
    assert hit["status"] == compare.LOOKS_FIXED
    assert hit["known_bug"] == {"upstream": "example/fw#7", "source": "registry"}
    assert miss["status"] == compare.PASS
    assert miss["known_bug"] == {"checked": ["example/fw#7"], "applies": False}
    code, err = _merge(shards, tmp_path / "merged", capsys)
    assert code == 1 and err == "", err  # looks fixed fails the run, as in the shard
    merged = {p["case"]: p for p in json.loads((tmp_path / "merged" / "run.json").read_text())[
        "pairs"] if p["adapter"] == "noise-floor"}
    assert merged["hit"]["known_bug"] == hit["known_bug"]
    assert merged["miss"]["known_bug"] == miss["known_bug"]


@pytest.mark.parametrize("case, changes, said", [
    # looks fixed made a plain pass by dropping its decision
    ("hit", {"status": compare.PASS}, "has no known_bug record in run.json, but the registry"),
    # the same, the decision replaced by a check that found no entry of another registry
    ("hit", {"status": compare.PASS, "known_bug": {"checked": [], "applies": False}},
     "records the registry entries none as checked, but the registry"),
    # a pass whose check was dropped: the record cannot tell it from a removed decision
    ("miss", {}, "has no known_bug record in run.json, but the registry"),
])
def test_merge_refuses_a_pair_whose_decision_was_removed(shards, tmp_path, capsys, case,
                                                         changes, said):
    folder, doc, pair = _pair(shards, case)
    pair.pop("known_bug")
    pair.update(changes)
    (folder / "run.json").write_text(json.dumps(doc))
    code, err = _merge(shards, tmp_path / "merged", capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{folder / 'run.json'}: pairs: pair {case}::noise-floor {said}" in err, err
    assert not (tmp_path / "merged").exists()
