"""run.json: versions, devices, precision flags, seeds and timing of a run."""

from __future__ import annotations

import json
import platform
import sys
from datetime import UTC, datetime

from harness import __version__


def torch_flags() -> dict:
    """TF32 and determinism flags of torch, only when torch is already imported by an adapter."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    flags = {
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_available": torch.cuda.is_available(),
    }
    try:
        flags["torch.backends.cudnn.rnn.fp32_precision"] = torch.backends.cudnn.rnn.fp32_precision
    except AttributeError:
        pass
    if torch.cuda.is_available():
        flags["gpu"] = torch.cuda.get_device_name()
        flags["cuda"] = torch.version.cuda
        flags["cudnn"] = torch.backends.cudnn.version()
    return flags


def tf_flags() -> dict:
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return {}
    return {
        "tf.tensor_float_32_execution": tf.config.experimental.tensor_float_32_execution_enabled(),
        "tf.gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    }


def run_json(result) -> str:
    versions = {"python": sys.version.split()[0], "rnn-harness": __version__}
    adapters = {}
    for a in result.adapters:
        reason = a.unavailable_reason()
        adapters[a.name] = {"available": reason is None, "reason": reason, "device": a.device}
        if reason is None:
            try:
                versions.update(a.versions())
            except Exception as exc:  # a version query must not lose the report
                adapters[a.name]["versions_error"] = str(exc)
    doc = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "versions": versions,
        "adapters": adapters,
        "precision_flags": {**torch_flags(), **tf_flags()},
        # "spec": the case as validated, so `rnn-harness merge` can render it without the file
        "cases": {c.name: {"seed": c.seed, "dtype": c.dtype, "file": c.source,
                           "prepare_seconds": round(result.prepare_seconds.get(c.name, 0.0), 4),
                           "spec": c.model_dump(mode="json")}
                  for c in result.cases},
        "case_errors": dict(result.case_errors),
        "pairs": [{"case": p.case, "adapter": p.adapter, "status": p.status,
                   "seconds": round(p.seconds, 4), "reason": p.reason,
                   **({"attribution": p.attribution} if getattr(p, "attribution", "") else {})}
                  for p in result.pairs],
        "seconds": round(result.seconds, 3),
        "jobs": getattr(result, "jobs", 1),
    }
    if getattr(result, "memory_limits", None):  # host and GPU limits the cases were held to
        doc["memory_limits"] = result.memory_limits
    if getattr(result, "shard", None):
        # one shard of a larger run (harness.shard): which one, the pairs it ran, and the whole
        # run's cases and adapters in their order, which `rnn-harness merge` restores
        doc["shard"] = result.shard
        doc["shard_pairs"] = [f"{p.case}::{p.adapter}" for p in result.pairs]
        doc["shard_of"] = result.shard_of
    return json.dumps(doc, indent=2, default=str) + "\n"
