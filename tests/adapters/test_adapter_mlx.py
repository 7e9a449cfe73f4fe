"""``mlx`` (MLX on the Linux CPU): its layout probe-confirmed, and mlx#3249's mechanism planted.

mlx#3249 (2026-03): ``nn.GRU`` called with ``hidden=None`` dropped ``bhn`` at t = 0 (present
from v0.7.0). The installed mlx 0.32.4 has the fix (``n = n + r * bhn`` where there is no
hidden state), so the old branch is planted: the adapter omits the initial state of an
``initial_state: none`` case, as a user does, so a GRU case there takes that branch and must be
DIVERGED at t = 0; the same case with the zeros given (``initial_state: zeros``), and a random
initial state, must pass (the signature: exact with zeros given, wrong at t = 0 without).
"""

from __future__ import annotations

import pytest
from support.case_factory import case_maker

from harness import compare
from harness.adapters.mlx import MLX
from harness.pairs import run_pair
from harness.prepare import prepare
from harness.probe import probe, render
from harness.spec import Case

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")
pytestmark = pytest.mark.mlx

make = case_maker(seed=9, dtype="float32", input_size=2, hidden_size=3, batch=2, seq_len=4,
                  cell="gru", weights={"scale": 2.0})


class GRUBefore3249(nn.GRU):
    """MLX's GRU before the fix of mlx#3249: with hidden=None, bhn is left out at t = 0."""

    def __call__(self, x, hidden=None):
        x = mx.addmm(self.b, x, self.Wx.T)
        x_rz, x_n = x[..., :-self.hidden_size], x[..., -self.hidden_size:]
        out = []
        for t in range(x.shape[-2]):
            rz, n = x_rz[..., t, :], x_n[..., t, :]
            if hidden is not None:
                h_proj = hidden @ self.Wh.T
                rz = rz + h_proj[..., :-self.hidden_size]
                h_n = h_proj[..., -self.hidden_size:] + self.bhn
            r, z = mx.split(mx.sigmoid(rz), 2, axis=-1)
            if hidden is not None:
                n = n + r * h_n  # the bug: no `else: n = n + r * bhn`
            n = mx.tanh(n)
            hidden = (1 - z) * n + (z * hidden if hidden is not None else 0)
            out.append(hidden)
        return mx.stack(out, axis=-2)


class Before3249(MLX):
    name = "mlx-before-3249"

    def module(self, nn_, case, input_size):
        if case.cell_kind.has_cell_state:
            return super().module(nn_, case, input_size)
        return GRUBefore3249(input_size, case.hidden_size)


def test_gru_hidden_none_dropping_bhn_is_diverged_at_t0():
    r = run_pair(prepare(make(name="mlx-3249", initial_state="none")), Before3249())
    assert r.status == compare.DIVERGED, r.reason
    f = r.first_diverging
    assert (f["output"], f["layer"], f["t"]) == ("y", 0, 0), compare.where(f)
    assert "initial state omitted (hidden=None" in r.reason
    # zeros passed explicitly, or a random state: the hidden-state branch, exact
    assert run_pair(prepare(make(name="given")), Before3249()).status == compare.PASS
    assert run_pair(prepare(make(name="random", initial_state="random")),
                    Before3249()).status == compare.PASS


def test_installed_mlx_omits_the_state_and_passes():
    r = run_pair(prepare(make(name="fixed", num_layers=2, bidirectional=True,
                              initial_state="none")), MLX())
    assert r.status == compare.PASS, r.reason
    assert "initial state omitted (hidden=None" in r.reason


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_layout_is_probe_confirmed(cell):
    result = probe(MLX(), Case(name=f"probe-{cell}", cell=cell, input_size=2, hidden_size=2,
                               forget_bias=1.0 if cell == "lstm" else 0.0,
                               bidirectional=True))
    assert result.ok, render(result)


def test_float64_still_diverges():
    """float64 is left out: MLX's float64 sigmoid is float32-accurate. Run anyway; when this
    fails, MLX computes float64 in float64: add it to the capabilities."""
    case = make(name="f64", dtype="float64", cell="lstm")
    assert MLX().not_applicable_reason(case) is not None

    class Anyway(MLX):
        capabilities = MLX.capabilities.__class__(
            **{**MLX.capabilities.__dict__, "dtypes": frozenset({"float64"})})

    assert run_pair(prepare(case), Anyway()).status == compare.DIVERGED
