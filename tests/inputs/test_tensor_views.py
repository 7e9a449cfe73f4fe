"""A ``.pt`` tensor that is a view (``torch.zeros(1).expand(2**25, 3)``) is saved as its one
element of storage: the file is small, the tensor's logical size is not. The readers check
each tensor's logical shape against the case and the memory limit before converting it, so
that a file of 3 KB cannot make the harness allocate a GiB (issue 53.4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.errors import WeightsError

torch = pytest.importorskip("torch")

ROOT = Path(__file__).parents[2]
ROWS = 2**25  # the view's logical rows: 2**25 x 3 float64 is 768 MiB
VIEW_MIB = ROWS * 3 * 8 / 2**20


def _state(view_of: str) -> dict:
    """An nn.LSTM(3, 4)'s state_dict with one tensor replaced by an expanded view."""
    state = dict(torch.nn.LSTM(3, 4).state_dict())
    state[view_of] = torch.zeros(1).expand(ROWS, state[view_of].shape[1])
    return state


# a case of that LSTM reading the file, and a module whose state_dict() returns the view; the
# process reports what happened and its own peak resident memory
SCRIPT = textwrap.dedent("""
    import json, resource, sys, torch
    import harness
    from harness.cli import main
    from harness.errors import HarnessError

    rc = main(["run", sys.argv[1], "--adapters", "reference", "--out", sys.argv[2], "--quiet"])

    class Viewed(torch.nn.LSTM):
        def state_dict(self, *args, **kwargs):
            state = super().state_dict(*args, **kwargs)
            state["weight_ih_l0"] = torch.zeros(1).expand(2**25, 3)
            return state

    try:
        harness.check(weights=Viewed(3, 4), adapters="reference", batch=1, seq_len=2)
        api = None
    except HarnessError as exc:
        api = str(exc)
    print(json.dumps({"rc": rc, "api": api,
                      "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def test_a_pt_view_is_refused_by_its_shape_without_allocating_it(tmp_path):
    """Under RNN_HARNESS_MAX_MEMORY=64MiB, ``run`` on a case whose .pt holds the view, and
    ``harness.check`` given a module whose state_dict() returns it, are refused naming the
    tensor and its shape; the process never holds the view's 768 MiB (torch and the harness
    take about 280 MiB)."""
    torch.save(_state("weight_ih_l0"), tmp_path / "view.pt")
    assert (tmp_path / "view.pt").stat().st_size < 4000
    case = tmp_path / "case.yaml"
    case.write_text("name: v\ncell: lstm\ninput_size: 3\nhidden_size: 4\nbatch: 1\nseq_len: 2\n"
                    "seed: 1\nweights: {file: view.pt}\n")
    got = subprocess.run([sys.executable, "-c", SCRIPT, str(case), str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "RNN_HARNESS_MAX_MEMORY": "64MiB"})
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout.splitlines()[-1])
    errors = [line for line in got.stderr.splitlines() if line.startswith("rnn-harness:")]
    assert result["rc"] == 2 and len(errors) == 1, got.stderr
    assert errors[0].startswith(f"rnn-harness: error: {tmp_path / 'view.pt'}: weight_ih_l0: "
                                f"expected shape [16, 3], got [{ROWS}, 3]"), errors
    assert result["api"] == (f"the torch Viewed module: weight_ih_l0: expected shape [16, 3], "
                             f"got [{ROWS}, 3]")
    assert result["peak_mib"] < VIEW_MIB / 2, result


def test_a_view_beyond_the_memory_limit_is_refused_before_conversion(tmp_path):
    """Read without a case (a file's sizes, or read_torch alone): the view's logical size as
    float64 is held against the limit; its sizes are read from the shapes, not converted."""
    from harness.readers import infer_case, read_torch

    path = tmp_path / "view.pt"
    torch.save(_state("weight_hh_l0"), path)
    with pytest.raises(WeightsError) as err:
        read_torch(path, max_bytes=64 * 2**20)
    assert str(err.value).startswith(f"{path}: weight_hh_l0: its tensors would take, as "
                                     "float64 with views at their full shape, 1 GiB, more "
                                     "than the memory limit of 0.0625 GiB"), str(err.value)
    with pytest.raises(WeightsError, match=rf"weight_hh_l0 of shape \[{ROWS}, 4\] is neither"):
        infer_case(path)
