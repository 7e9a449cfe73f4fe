"""Splitting a run's case x adapter pairs into N shards (``run --shard K/N``, pytest ``--shard``).

A pair is named by its id ``case::adapter``. The ids are put in the order of their SHA-256
digests and dealt round-robin: the i-th id in that order goes to shard ``i % N + 1``. So the split

- depends only on the set of ids, not on the order of the case files or of the adapter registry
  (nor on Python's per-process string hashing);
- puts every pair in exactly one shard, and the shards' sizes differ by at most one;
- mixes cases and adapters: dealing the plainly sorted ids would give a shard the same adapters
  of every case whenever the number of adapters is a multiple of N (all of TensorFlow's pairs
  in one shard), while the digest order spreads both the slow frameworks and the expensive
  cases. The price: a case is prepared (its reference outputs computed) in each shard that runs
  one of its pairs, which is most shards.

Adding or removing a pair can move other pairs to other shards: shards are a way to run one set
of pairs on several machines, not stable names for pairs across runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from harness.errors import HarnessError

SEPARATOR = "::"
# the most shards a run is split into (run.json's bound too: merge lists missing shards one by
# one)
MAX_SHARDS = 10_000


def pair_id(case: str, adapter: str) -> str:
    """``case::adapter``, the id of a pair in reports, progress lines and pytest items."""
    return f"{case}{SEPARATOR}{adapter}"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        assert 1 <= self.index <= self.count, (self.index, self.count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def pick(self, ids: Iterable[str]) -> list[str]:
        """The ids of this shard, in the order given (duplicates are one pair).

        A count above the number of pairs would leave shards with nothing to run: refused."""
        ids = list(dict.fromkeys(ids))
        if self.count > len(ids):
            raise HarnessError(f"shard {self}: there are only {len(ids)} pair(s) to share out, "
                               f"expected N <= {len(ids)}", field="--shard")
        order = sorted(ids, key=_digest)
        mine = set(order[self.index - 1::self.count])
        return [i for i in ids if i in mine]


def parse_shard(text: str, option: str = "--shard") -> Shard:
    """``"K/N"`` with 1 <= K <= N; anything else is a HarnessError naming ``option``."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
    if not m:
        raise HarnessError(f"expected K/N (shard K of N, e.g. 2/4), got {text!r}", field=option)
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1:
        raise HarnessError(f"expected N >= 1 in K/N, got {text!r}", field=option)
    if not 1 <= index <= count:
        raise HarnessError(f"expected 1 <= K <= N in K/N, got {text!r}", field=option)
    if count > MAX_SHARDS:
        raise HarnessError(f"expected N <= {MAX_SHARDS} in K/N, got {text!r}", field=option)
    return Shard(index, count)


def partition(ids: Iterable[str], count: int) -> list[list[str]]:
    """The ids of each of ``count`` shards (list k holds shard k+1's), each sorted."""
    assert count >= 1
    order = sorted(set(ids), key=_digest)
    return [sorted(order[k::count]) for k in range(count)]


def _digest(pid: str) -> tuple[str, str]:
    return hashlib.sha256(pid.encode()).hexdigest(), pid
