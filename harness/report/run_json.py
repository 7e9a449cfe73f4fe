"""run.json: versions, devices, precision flags, seeds and timing of a run. One builder
(:func:`run_record`) writes it for a run and for a merge of shards, which gives it what it
takes from the shards' records instead of this process (:class:`FromShards`)."""

from __future__ import annotations

import json
import platform
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.report.record import SCHEMA_VERSION, RunRecord
from harness.version import __version__

# an adapter's versions() also says how it ran (Keras's backend, LiteRT's unroll, a thread
# count, the GPU's name): settings, which differ between adapters of one run and are no versions
NUMERIC_SETTINGS = ("torch_threads", "intra_op_num_threads")


def is_version(key: str, value: object) -> bool:
    """Whether an entry of an adapter's versions is a package's version (it begins with a
    digit) rather than a setting (``keras_backend: jax``, ``unroll: True``, a thread count)."""
    return key not in NUMERIC_SETTINGS and bool(re.match(r"\d", str(value)))


def split_versions(entries: dict) -> tuple[dict, dict]:
    """(versions, settings) of an adapter's versions (:func:`is_version`)."""
    versions = {k: v for k, v in entries.items() if is_version(k, v)}
    return versions, {k: v for k, v in entries.items() if k not in versions}


@dataclass
class FromShards:
    """What a merged report's run.json takes from its shards' records (harness.merge): where
    they ran, their versions and flags, each adapter's and case's entry (prepare seconds
    summed by the builder from the RunResult), and the shard bookkeeping (``shards``,
    ``shard_runs``, ``shard_of``, ``missing_shards``)."""

    platform: str | None
    machine: str | None
    versions: dict[str, Any]
    precision_flags: dict[str, Any]
    adapters: dict[str, dict]
    cases: dict[str, dict]
    jobs: int
    left_out: dict[str, str] = field(default_factory=dict)
    bookkeeping: dict[str, Any] = field(default_factory=dict)


def _pair(p: Any) -> dict[str, Any]:
    """A pair's entry: its status and time, and what its judge kept for merge
    (:meth:`harness.judges.Verdict.record`)."""
    verdict = getattr(p, "verdict", None)
    return {"case": p.case, "adapter": p.adapter, "status": p.status,
            "seconds": round(p.seconds, 4), "reason": p.reason,
            **({"attribution": p.attribution} if getattr(p, "attribution", "") else {}),
            **(verdict.record() if verdict is not None else {})}


def _environment(result: Any) -> tuple[dict, dict, dict]:
    """(versions, adapters, precision flags) of a run, from where each adapter ran."""
    versions = {"python": sys.version.split()[0], "rnn-harness": __version__}
    adapters, flags = {}, {}
    environments = getattr(result, "environments", None) or {}
    for a in result.adapters:
        # taken by the run where the adapter ran (Adapter.environment), or, for an adapter no
        # pair reached, its availability; a result without it says so rather than asking here
        env = environments.get(a.name) or {"available": False,
                                           "reason": "not recorded by the run"}
        adapters[a.name] = {"available": env["available"], "reason": env["reason"],
                            "device": a.device}
        if env.get("checked") is False:  # no pair reached it: its installed packages only
            adapters[a.name]["checked"] = False
        if a.named_only is not None:
            adapters[a.name]["named_only"] = a.named_only
        if "versions" in env:
            adapters[a.name]["environment"] = {"versions": env["versions"],
                                               "precision_flags": env["precision_flags"]}
            if "cpu_flags" in env:  # the host's, where the adapter ran (harness.cpu_flags)
                adapters[a.name]["environment"]["cpu_flags"] = env["cpu_flags"]
            versions.update(split_versions(env["versions"])[0])  # settings stay per adapter
            flags.update(env["precision_flags"])
        if "versions_error" in env:
            adapters[a.name]["versions_error"] = env["versions_error"]
    return versions, adapters, flags


def run_record(result: Any, shards: FromShards | None = None) -> RunRecord:
    """The run record of a RunResult (run.json, written by harness.report.folder.write_run);
    ``shards``: a merged report's (harness.merge), what it takes from the shards' records."""
    if shards is None:
        versions, adapters, flags = _environment(result)
        # "spec": the case as validated, so `rnn-harness merge` can render it without the file
        cases = {c.name: {"seed": c.seed, "dtype": c.dtype, "file": c.source,
                          "spec": c.model_dump(mode="json")} for c in result.cases}
        where = (platform.platform(), platform.machine())
        jobs, left_out = getattr(result, "jobs", 1), dict(getattr(result, "left_out", None) or {})
    else:
        versions, adapters, flags = shards.versions, shards.adapters, shards.precision_flags
        cases, where = shards.cases, (shards.platform, shards.machine)
        jobs, left_out = shards.jobs, shards.left_out
    doc = {
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": where[0],
        "machine": where[1],
        "versions": versions,
        "adapters": adapters,
        "precision_flags": flags,
        # "spec": the case as validated, so `rnn-harness merge` can render it without the file
        "cases": {c.name: dict(cases[c.name], prepare_seconds=round(
            result.prepare_seconds.get(c.name, 0.0), 4)) for c in result.cases},
        "case_errors": dict(result.case_errors),
        "left_out": left_out,
        # the blind-spot warning of each case that has one (harness.blind)
        "blind_spots": {n: c.warning for n, c in result.blind.items() if c.warning},
        # each case's whole check (harness.blind), so a merged report renders it unchanged
        # (a merge of reports from before them has only their warnings: blind_spots)
        "blind_checks": {n: c.record() for n, c in result.blind.items()
                         if not getattr(c, "recorded_warning", "")},
        "pairs": [_pair(p) for p in result.pairs],
        "seconds": round(result.seconds, 3),
        "jobs": jobs,
    }
    if result.memory_limits:  # host and GPU limits the cases were held to
        doc["memory_limits"] = result.memory_limits
    if getattr(result, "shard", None):
        # one shard of a larger run (harness.shard): which one, the pairs it ran, and the whole
        # run's cases and adapters in their order, which `rnn-harness merge` restores
        doc["shard"] = result.shard
        doc["shard_pairs"] = [f"{p.case}::{p.adapter}" for p in result.pairs]
        doc["shard_of"] = result.shard_of
    if shards is not None:
        doc.update(shards.bookkeeping)
    return RunRecord.model_validate(json.loads(json.dumps(doc, default=str)))
