"""The environment in run.json (versions, precision flags) is taken where each adapter ran, in
its own process, and recorded by the runner (harness/adapters/base.py, Adapter.environment):
also under --isolate and --jobs, where the parent process never runs the adapter."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from support.fault_adapters import TellsItsProcess

from harness import runner
from harness.adapters.reference import Reference
from harness.frameworks.torch import torch_precision_flags
from harness.report.run_json import run_record
from harness.run_options import RunOptions
from harness.spec import Case

pytestmark = pytest.mark.slow  # worker processes

CASES = [Case(name=f"tiny-{k}", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=3,
              seed=k) for k in range(2)]


@pytest.mark.parametrize("options, elsewhere", [
    ({}, False),
    ({"isolate": True}, True),
    ({"jobs": 2}, True),
], ids=["in-process", "isolate", "jobs"])
def test_environment_is_taken_where_the_adapter_ran(options, elsewhere):
    result = runner.run(CASES, [Reference(), TellsItsProcess()], RunOptions(**options))
    env = result.environments["tells-its-process"]
    pid = int(env["versions"]["tells-its-process"])
    assert env["available"] and env["precision_flags"] == {"tells-its-process.pid": pid}
    assert (pid != os.getpid()) == elsewhere
    doc = run_record(result).model_dump(mode="json", exclude_unset=True)
    assert doc["versions"]["tells-its-process"] == str(pid)
    assert doc["precision_flags"]["tells-its-process.pid"] == pid
    assert doc["adapters"]["tells-its-process"]["environment"]["versions"] == env["versions"]


class _Raises:
    def __get__(self, obj, owner):
        raise RuntimeError("you have used the new fp32_precision API; the legacy allow_tf32 "
                           "cannot be read")  # as torch >= 2.9 does


def _fake_torch(new_api: bool) -> SimpleNamespace:
    legacy = {"allow_tf32": True}
    if new_api:
        cudnn = type("Cudnn", (), {"allow_tf32": _Raises(),
                                   "rnn": SimpleNamespace(fp32_precision="tf32")})()
        matmul = type("Matmul", (), {"allow_tf32": _Raises(), "fp32_precision": "ieee"})()
    else:
        cudnn, matmul = SimpleNamespace(**legacy), SimpleNamespace(**legacy)
    return SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn,
                                                    cuda=SimpleNamespace(matmul=matmul)),
                           are_deterministic_algorithms_enabled=lambda: False)


def test_torch_flags_never_read_the_legacy_tf32_flag_where_fp32_precision_exists():
    assert torch_precision_flags(_fake_torch(new_api=True)) == {
        "torch.deterministic_algorithms": False,
        "torch.backends.cudnn.rnn.fp32_precision": "tf32",
        "torch.backends.cuda.matmul.fp32_precision": "ieee"}
    assert torch_precision_flags(_fake_torch(new_api=False)) == {
        "torch.deterministic_algorithms": False, "torch.backends.cudnn.allow_tf32": True,
        "torch.backends.cuda.matmul.allow_tf32": True}


def test_an_unknown_xla_flag_makes_the_jax_pairs_error_rows_not_the_end_of_the_run(tmp_path):
    """XLA ends a process at its first computation on a flag it does not know (one fatal log
    line, no exception): checked before, the JAX adapters' pairs are error rows naming
    XLA_FLAGS, and the report is written."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("flax")
    case = tmp_path / "c.yaml"
    case.write_text("name: c\ncell: gru\ninput_size: 2\nhidden_size: 3\nbatch: 2\nseq_len: 3\n")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(case), "--adapters",
                           "reference,flax-linen", "--out", str(tmp_path / "r"), "--quiet",
                           "--plots", "none"], cwd=Path(__file__).parents[2],
                          env={**os.environ, "XLA_FLAGS": "--xla_no_such_flag_46"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    pair = next(p for p in json.loads((tmp_path / "r" / "run.json").read_text())["pairs"]
                if p["adapter"] == "flax-linen")
    assert pair["status"] == "error"
    assert pair["reason"].startswith("XlaFlagsError: XLA_FLAGS='--xla_no_such_flag_46' is "
                                     "refused by XLA"), pair["reason"]
    assert "Unknown flag in XLA_FLAGS: --xla_no_such_flag_46" in pair["reason"]
