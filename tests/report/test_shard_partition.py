"""The shard partition and pytest ``--shard``: which shard holds which pair.

The partition is checked as properties (every pair in exactly one shard, balanced, independent of
input order, the same in every process); pytest's shards collect every item exactly once, and a
bad ``K/N`` is a usage error."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.shard import Shard, pair_id, parse_shard, partition

ROOT = Path(__file__).parents[2]


# The partition -------------------------------------------------------------------------------

def _ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    cases = [f"case{rng.randrange(10**6)}" for _ in range(max(1, n // 5))]
    adapters = ["reference", "noise-floor", "torch-cpu", "keras", "onnxruntime"]
    return [pair_id(c, a) for c in dict.fromkeys(cases) for a in adapters][:n]


@pytest.mark.parametrize("n_ids", [0, 1, 7, 45, 369])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 9])
def test_partition_every_pair_once_balanced_and_order_independent(n_ids, count):
    ids = _ids(n_ids, seed=n_ids * 31 + count)
    shards = partition(ids, count)
    assert len(shards) == count
    flat = [i for s in shards for i in s]
    assert sorted(flat) == sorted(set(ids))  # every pair in exactly one shard
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1, sizes
    shuffled = list(reversed(ids))
    random.Random(1).shuffle(shuffled)
    assert partition(shuffled, count) == shards  # case-file and registry order do not matter
    if count > len(set(ids)):  # a shard would have nothing to run
        with pytest.raises(HarnessError, match="only"):
            Shard(1, count).pick(shuffled)
        return
    for k in range(1, count + 1):  # pick keeps the caller's order
        picked = Shard(k, count).pick(shuffled)
        assert set(picked) == set(shards[k - 1])
        assert picked == [i for i in shuffled if i in set(picked)]


def test_partition_is_stable_across_processes():
    """A hash of its own (not Python's salted str hash): another interpreter agrees."""
    ids = _ids(60, seed=3)
    code = ("import json, sys; from harness.shard import partition; "
            "print(json.dumps(partition(json.loads(sys.stdin.read()), 4)))")
    got = subprocess.run([sys.executable, "-c", code], input=json.dumps(ids), text=True,
                         capture_output=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    assert json.loads(got.stdout) == partition(ids, 4)


def test_partition_mixes_adapters_across_shards():
    """Dealing plainly sorted ids would give shard k the same adapters of every case when the
    number of adapters is a multiple of N; the digest order does not."""
    ids = [pair_id(f"case{c:02d}", a) for c in range(20) for a in ("a", "b", "c")]
    for shard in partition(ids, 3):
        assert {i.split("::")[1] for i in shard} == {"a", "b", "c"}


@pytest.mark.parametrize("text,index,count", [("1/1", 1, 1), ("2/4", 2, 4), (" 3 / 3 ", 3, 3)])
def test_parse_shard(text, index, count):
    assert parse_shard(text) == Shard(index, count)
    assert str(parse_shard(text)) == f"{index}/{count}"


@pytest.mark.parametrize("text", ["0/3", "4/3", "a/b", "1", "1/0", "-1/3", "1/2/3", "", "1/20000",
                                  "10001/10001"])
def test_parse_shard_refuses(text):
    with pytest.raises(HarnessError, match="--shard"):
        parse_shard(text)


# pytest --shard -------------------------------------------------------------------------------

def _collected(*args: str) -> list[str]:
    got = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", *args], capture_output=True, text=True, cwd=ROOT)
    assert got.returncode in (0, 5), got.stdout + got.stderr  # 5: nothing collected
    return [line for line in got.stdout.splitlines() if "::" in line]


def test_pytest_shards_run_every_item_exactly_once():
    targets = ["cases/initial-state.yaml", "cases/gru-reset.yaml", "tests/inputs/test_spec.py"]
    everything = _collected(*targets)
    shards = [_collected(*targets, "--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(i for s in shards for i in s) == sorted(everything)
    units = [i for i in everything if i.startswith("tests/")]
    pairs = [i for i in everything if i.startswith("cases/")]
    assert units and pairs
    assert set(units) <= set(shards[0])  # the harness's own tests: shard 1 only
    assert not any(i.startswith("tests/") for s in shards[1:] for i in s)
    sizes = [len([i for i in s if i.startswith("cases/")]) for s in shards]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(pairs)


def test_pytest_refuses_a_bad_shard():
    got = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", "cases/gru-reset.yaml", "--shard", "4/3"],
                         capture_output=True, text=True, cwd=ROOT)
    assert got.returncode == 4  # usage error
    assert "--shard: expected 1 <= K <= N in K/N, got '4/3'" in got.stderr
