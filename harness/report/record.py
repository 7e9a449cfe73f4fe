"""The run record: run.json of a report folder, as data (pydantic).

``schema_version`` says which shape a file has: 1 is the first with the field; files written
before it (no field, read as 0) have the same shape and are read alike. 2 records each case's
whole blind-spot check (``blind_checks``); an earlier file has only its warning text
(``blind_spots``), which a merge carries over as it is (:func:`harness.merge.merge_reports`).
A file of a newer schema than this installation knows is refused, not guessed at.
:mod:`harness.report.folder` writes these records and :mod:`harness.report.read_back` reads
them; nothing else parses run.json.

Every section is open to additions (``extra="allow"``): a newer rnn-harness can record more
(e.g. an adapter's ``environment``) without making its reports unreadable here.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.shard import MAX_SHARDS  # `run --shard K/N` refuses N above it too

SCHEMA_VERSION = 2

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
_SHARD = re.compile(r"^([1-9][0-9]{0,5})/([1-9][0-9]{0,5})$")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class PairRecord(_Open):
    """One case x adapter pair: its verdict and time."""

    case: str
    adapter: str
    status: str
    seconds: Seconds = 0.0
    reason: str | None = ""
    attribution: str | None = None
    # a quantized pair's SQNR over y and an ideal quantization's (None: infinite)
    quantization: dict[str, float | None] | None = None


class CaseRecord(_Open):
    """A case as it ran; ``spec``: the case as validated (``merge`` renders from it)."""

    seed: int | None = None
    dtype: str | None = None
    file: str | None = None
    prepare_seconds: Seconds = 0.0
    spec: dict[str, Any] | None = None


class AdapterRecord(_Open):
    """An adapter's availability where the run ran; ``environment``: what it ran on (driver,
    device, library builds), for the adapters that record it."""

    available: bool
    reason: str | None = None
    device: str | None = None
    versions_error: str | None = None
    environment: dict[str, Any] | None = None
    named_only: str | None = None  # why it is left out of the default selection (run when named)


class ShardOf(_Open):
    """The whole run a shard belongs to: its cases and adapters, in order."""

    cases: list[str]
    adapters: list[str]


class RunRecord(_Open):
    """run.json. ``shard``: this run is shard K/N of a larger one; ``shards``/``shard_runs``/
    ``missing_shards``: this report was merged from shards."""

    schema_version: int = Field(default=0, ge=0)
    created: str
    platform: str | None = None
    machine: str | None = None
    versions: dict[str, Any]
    adapters: dict[str, AdapterRecord] = {}
    precision_flags: dict[str, Any] = {}
    cases: dict[str, CaseRecord] = {}
    case_errors: dict[str, str] = {}
    blind_spots: dict[str, str] = {}
    blind_checks: dict[str, dict[str, Any]] = {}
    # named-only adapters the run's default selection left out: name -> why (run when named)
    left_out: dict[str, str] = {}
    pairs: list[PairRecord]
    seconds: Seconds = 0.0
    jobs: int | None = None
    shard: str | None = None
    shard_pairs: list[str] | None = None
    shard_of: ShardOf | None = None
    shards: list[str] | None = None
    shard_runs: dict[str, dict[str, Any]] | None = None
    missing_shards: list[str] | None = None

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, v: int) -> int:
        if v > SCHEMA_VERSION:
            raise ValueError(f"schema {v} is newer than this rnn-harness reads "
                             f"({SCHEMA_VERSION}); upgrade rnn-harness")
        return v

    @field_validator("versions")
    @classmethod
    def _ours(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "rnn-harness" not in v:  # every run.json this tool writes names its version
            raise ValueError("expected the rnn-harness version among the versions")
        return v

    @field_validator("shard")
    @classmethod
    def _shard(cls, v: str | None) -> str | None:
        if v is None:
            return v
        m = _SHARD.match(v)
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)) <= MAX_SHARDS:
            raise ValueError(f"expected K/N with 1 <= K <= N <= {MAX_SHARDS}, got {v[:40]!r}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RunRecord:
        if self.shard is not None and self.shard_of is not None:
            n = int(self.shard.split("/")[1])
            total = len(self.shard_of.cases) * len(self.shard_of.adapters)
            if n > total:
                raise ValueError(f"shard {self.shard} of a run of {total} pair(s): expected "
                                 f"N <= {total}")
        return self

    @property
    def shard_count(self) -> int | None:
        return int(self.shard.split("/")[1]) if self.shard else None

    @property
    def shard_index(self) -> int | None:
        return int(self.shard.split("/")[0]) if self.shard else None
