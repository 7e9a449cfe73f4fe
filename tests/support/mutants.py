"""Planted implementation bugs in a real framework's run, for the mutation test
(``test_mutation.py``) and for measuring the harness's kill rate.

Each mutant is torch-cpu with one bug of a kind people really write, planted around
``nn.LSTM`` / ``nn.GRU``: in the native tensors it loads (:data:`WEIGHT_BUGS`) or in a wrapper
around the module's forward (:data:`FORWARD_BUGS`). The harness itself is not changed. A bug
that cannot apply to a case (h/c swapped in a GRU, padding without lengths) leaves the run as
it is: such a pair does not move the outputs and is not counted.

Measure the kill rate of a checkout's ``harness`` (it uses only ``prepare`` and ``run_pair``,
so it also measures checkouts from before this file)::

    PYTHONPATH=. python tests/support/mutants.py                    # this checkout
    PYTHONPATH=/path/to/other/checkout python tests/support/mutants.py
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import compare
from harness.adapters.torch_cpu import TorchCPU
from harness.cases import load_cases
from harness.pairs import run_pair, selected_by_case
from harness.prepare import Prepared, prepare
from harness.results import PairResult
from harness.spec import Case

CASES = Path(__file__).resolve().parents[2] / "cases"

# name -> what it plants; the order of the catalogue in README.md and docs/equations.md
CATALOGUE = {
    "gate-order": "the f and g gate blocks (GRU: r and z) swapped in every tensor",
    "bias-halves": "bR dropped (bias_hh zero): one bias half loaded, as for a one-bias layout",
    "forget-offset": "1.0 added to the f bias (a runtime forget_bias baked in twice)",
    "half-weights": "weights rounded to float16 on their way in",
    "initial-state-ignored": "h0/c0 replaced by zeros",
    "state-not-carried": "the sequence run in two chunks, the second from h0/c0 again",
    "padding-not-packed": "variable lengths run padded (no packing; y masked after)",
    "float32-compute": "a float64 case computed in float32",
    "h-c-swapped": "h_n and c_n returned swapped",
    "reverse-not-per-length": "the reverse direction read from the padded end, not each "
                              "sequence's last step",
    "directions-swapped": "y's reverse features before the forward ones",
}
WEIGHT_BUGS = ("gate-order", "bias-halves", "forget-offset", "half-weights")
FORWARD_BUGS = tuple(n for n in CATALOGUE if n not in WEIGHT_BUGS)


def _blocks(case: Case) -> int:
    return 4 if case.cell == "lstm" else 3


def _mutated_native(bug: str, case: Case, native: dict[str, np.ndarray]) -> dict:
    out = {k: np.array(v) for k, v in native.items()}
    H = case.hidden_size
    for k, v in out.items():
        gates = k.startswith(("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
        if bug == "gate-order" and gates:
            order = [0, 2, 1, 3] if case.cell == "lstm" else [1, 0, 2]
            out[k] = np.concatenate([v[g * H:(g + 1) * H] for g in order])
        elif bug == "bias-halves" and k.startswith("bias_hh"):
            out[k] = np.zeros_like(v)
        elif bug == "forget-offset" and case.cell == "lstm" and k.startswith("bias_ih"):
            out[k][H:2 * H] += 1.0
        elif bug == "half-weights":
            out[k] = v.astype(np.float16).astype(v.dtype)
    return out


def _wrapped(bug: str, case: Case, module):
    """``module`` inside an nn.Module whose forward plants ``bug``."""
    import torch
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

    lstm, bidi = case.cell == "lstm", case.num_directions == 2
    F = case.out_size

    def pack(y, lengths):
        return pack_padded_sequence(y, lengths, batch_first=True, enforce_sorted=False)

    class Mutant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, x, hx):
            packed = isinstance(x, PackedSequence)
            if bug == "initial-state-ignored":
                hx = tuple(torch.zeros_like(h) for h in hx) if lstm else torch.zeros_like(hx)
            elif bug == "state-not-carried" and not packed and x.shape[1] > 1:
                k = (x.shape[1] + 1) // 2
                y1, _ = self.inner(x[:, :k], hx)
                y2, hx2 = self.inner(x[:, k:], hx)  # the state of chunk 1 is dropped
                return torch.cat([y1, y2], dim=1), hx2
            elif bug == "padding-not-packed" and packed:
                padded, lengths = pad_packed_sequence(x, batch_first=True)
                y, hx = self.inner(padded, hx)  # h_n: the state after the padding
                return pack(y, lengths), hx
            elif bug == "float32-compute" and x.data.dtype == torch.float64:
                inner = self.inner.float()
                try:
                    y, hx = inner(x.float(), tuple(h.float() for h in hx) if lstm
                                  else hx.float())
                finally:
                    self.inner.double()
                return y.double(), (tuple(h.double() for h in hx) if lstm else hx.double())
            elif bug == "reverse-not-per-length" and packed and bidi:
                padded, lengths = pad_packed_sequence(x, batch_first=True)
                y, hc = self.inner(x, hx)
                y_pad, _ = pad_packed_sequence(y, batch_first=True)
                wrong, hc_wrong = self.inner(padded, hx)
                y_pad = torch.cat([y_pad[..., :F], wrong[..., F:]], dim=-1)
                reverse = torch.arange(hx[0].shape[0] if lstm else hx.shape[0]) % 2 == 1

                def mix(right, bad):
                    return torch.where(reverse[:, None, None], bad, right)

                hc = (tuple(mix(a, b) for a, b in zip(hc, hc_wrong, strict=True)) if lstm
                      else mix(hc, hc_wrong))
                return pack(y_pad, lengths), hc
            y, hc = self.inner(x, hx)
            if bug == "h-c-swapped" and lstm and case.proj_size == 0:
                hc = (hc[1], hc[0])
            elif bug == "directions-swapped" and bidi:
                data = y.data if packed else y
                data = torch.cat([data[..., F:], data[..., :F]], dim=-1)
                y = y._replace(data=data) if packed else data
            return y, hc

    return Mutant()


class Planted(TorchCPU):
    """torch-cpu with one planted bug (:data:`CATALOGUE`)."""

    bug = ""

    def build(self, case: Case, native: dict[str, np.ndarray]):
        if self.bug in WEIGHT_BUGS:
            return super().build(case, _mutated_native(self.bug, case, native))
        return _wrapped(self.bug, case, super().build(case, native))


def planted(bug: str) -> Planted:
    assert bug in CATALOGUE, bug
    return type(f"Planted_{bug}", (Planted,), {"name": f"torch-{bug}", "bug": bug})()


def bundled_cases() -> list[Case]:
    """The bundled forward cases torch-cpu runs (the gradient cases check the backward pass;
    these bugs are in the forward)."""
    adapter = TorchCPU()
    cases = [c for f in sorted(CASES.glob("*.yaml")) for c in load_cases(f)]
    cases += load_cases(CASES / "trained-like" / "trained-like.yaml")
    return [c for c in cases
            if not adapter.not_applicable_reason(c) and selected_by_case(c, adapter)]


def _forward(out) -> dict[str, np.ndarray]:
    return {k: v for k, v in (("y", out.y), ("h_n", out.h_n), ("c_n", out.c_n))
            if v is not None}


def _distance(a, b) -> float:
    """max |a − b| over the forward outputs (NaN counts as infinitely far)."""
    worst = 0.0
    for k, v in _forward(a).items():
        e = np.abs(np.asarray(v, np.float64) - np.asarray(_forward(b)[k], np.float64))
        worst = max(worst, math.inf if np.isnan(e).any() else float(e.max(initial=0.0)))
    return worst


@dataclass
class Trial:
    case: str
    bug: str
    status: str
    moved: float  # max |mutant − clean| over y, h_n, c_n
    threshold: float  # max(100x the clean pair's error, 10x atol)
    reason: str

    @property
    def must_kill(self) -> bool:
        return self.moved > self.threshold

    @property
    def killed(self) -> bool:
        return self.status == compare.DIVERGED


def trials(cases: list[Case] | None = None, bugs: tuple[str, ...] | None = None,
           prepared: dict[str, Prepared] | None = None) -> tuple[list[PairResult], list[Trial]]:
    """The clean torch-cpu pair of every case, and every bug x case trial, each run through
    :func:`harness.pairs.run_pair` with its defaults (what ``run`` does)."""
    prepared = {} if prepared is None else prepared
    clean_pairs, out = [], []
    for case in bundled_cases() if cases is None else cases:
        prep = prepared.get(case.name) or prepared.setdefault(case.name, prepare(case))
        clean = run_pair(prep, TorchCPU())
        clean_pairs.append(clean)
        tol = compare.tolerance_for(case, "torch-cpu", TorchCPU().tolerances)
        threshold = max(100 * _distance(clean.outputs, prep.reference), 10 * tol.atol)
        for bug in bugs or tuple(CATALOGUE):
            r = run_pair(prep, planted(bug))
            moved = _distance(r.outputs, clean.outputs) if r.outputs is not None else math.inf
            out.append(Trial(case.name, bug, r.status, moved, threshold, r.reason))
    return clean_pairs, out


def kill_rate(results: list[Trial]) -> tuple[int, int]:
    """(killed, must be killed): trials whose bug moves the outputs beyond the threshold."""
    must = [t for t in results if t.must_kill]
    return sum(t.killed for t in must), len(must)


def main() -> int:
    clean, results = trials()
    wrong = [p for p in clean if p.status == compare.DIVERGED]
    killed, must = kill_rate(results)
    for bug in CATALOGUE:
        mine = [t for t in results if t.bug == bug]
        k, m = kill_rate(mine)
        escaped = [f"{t.case} ({t.moved:.2g}: {t.reason[:60]})" for t in mine
                   if t.must_kill and not t.killed]
        print(f"{bug:24} {k:3}/{m:<3} killed" + (f"; escaped: {', '.join(escaped)}"
                                                 if escaped else ""))
    print(f"kill rate: {killed}/{must} = {killed / max(must, 1):.1%} of the bug x case pairs "
          f"that move the outputs beyond max(100x the clean error, 10x atol); "
          f"clean torch-cpu DIVERGED on {len(wrong)} of {len(clean)} cases")
    return 0 if killed == must and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
