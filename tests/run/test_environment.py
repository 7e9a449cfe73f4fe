"""The environment in run.json (versions, precision flags) is taken where each adapter ran, in
its own process, and recorded by the runner (harness/adapters/base.py, Adapter.environment):
also under --isolate and --jobs, where the parent process never runs the adapter."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from support.fault_adapters import TellsItsProcess

from harness import runner
from harness.adapters._torch import torch_precision_flags
from harness.adapters.reference import Reference
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
