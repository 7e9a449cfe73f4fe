"""A ``.pt`` tensor that is a view (``torch.zeros(1).expand(2**25, 3)``) is saved as its one
element of storage: the file is small, the tensor's logical size is not. The readers check
each tensor's logical shape against the case and the memory limit before converting it, so
that a file of 3 KB cannot make the harness allocate a GiB (issue 53.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError, WeightsError

torch = pytest.importorskip("torch")

ROWS = 2**25  # the view's logical rows: 2**25 x 3 float64 is 768 MiB
VIEW_MIB = ROWS * 3 * 8 / 2**20


def _state(view_of: str) -> dict:
    """An nn.LSTM(3, 4)'s state_dict with one tensor replaced by an expanded view."""
    state = dict(torch.nn.LSTM(3, 4).state_dict())
    state[view_of] = torch.zeros(1).expand(ROWS, state[view_of].shape[1])
    return state


def _peak_growth_mib(call) -> float:
    """How far this process's peak resident memory rose above its resident memory during
    ``call()`` (Linux: writing 5 to /proc/self/clear_refs resets the peak, VmHWM)."""
    def hwm() -> float:
        status = Path("/proc/self/status").read_text()
        return int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]
                   ) / 1024

    Path("/proc/self/clear_refs").write_text("5")
    before = hwm()
    call()
    return hwm() - before


class Viewed(torch.nn.LSTM):
    """An nn.LSTM(3, 4) whose state_dict() returns its input weights as the view."""

    def state_dict(self, *args, **kwargs):
        state = super().state_dict(*args, **kwargs)
        state["weight_ih_l0"] = torch.zeros(1).expand(ROWS, 3)
        return state


def test_a_pt_view_is_refused_by_its_shape_without_allocating_it(tmp_path, monkeypatch, capsys):
    """Under RNN_HARNESS_MAX_MEMORY=64MiB, ``run`` on a case whose .pt holds the view, and
    ``harness.check`` given a module whose state_dict() returns it, are refused naming the
    tensor and its shape; the process never holds the view's 768 MiB."""
    import harness
    from harness.cli import main

    monkeypatch.setenv("RNN_HARNESS_MAX_MEMORY", "64MiB")
    torch.save(_state("weight_ih_l0"), tmp_path / "view.pt")
    assert (tmp_path / "view.pt").stat().st_size < 4000
    case = tmp_path / "case.yaml"
    case.write_text("name: v\ncell: lstm\ninput_size: 3\nhidden_size: 4\nbatch: 1\nseq_len: 2\n"
                    "seed: 1\nweights: {file: view.pt}\n")
    codes = []
    grew = _peak_growth_mib(lambda: codes.append(main([
        "run", str(case), "--adapters", "reference", "--out", str(tmp_path / "out"),
        "--quiet"])))
    err = capsys.readouterr().err.splitlines()
    assert codes == [2] and len(err) == 1, err
    assert err[0].startswith(f"rnn-harness: error: {tmp_path / 'view.pt'}: weight_ih_l0: "
                             f"expected shape [16, 3], got [{ROWS}, 3]"), err
    assert grew < VIEW_MIB / 4, grew

    def check() -> None:
        with pytest.raises(HarnessError) as exc:
            harness.check(weights=Viewed(3, 4), adapters="reference", batch=1, seq_len=2)
        assert str(exc.value) == (f"the torch Viewed module: weight_ih_l0: expected shape "
                                  f"[16, 3], got [{ROWS}, 3]")

    grew = _peak_growth_mib(check)
    assert grew < VIEW_MIB / 4, grew


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
