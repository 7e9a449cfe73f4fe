"""Scoring a hypothesis: the claimed reading of a weights file with some mistakes applied, run
through the float64 reference and measured against the outputs the weights really produce, in
units of the tolerance (the noise-floor rule of :func:`harness.compare.effective_ratio`
included).

The blind-spot check (:mod:`harness.blind`, part of the run) and the doctor (a tool) both
score hypotheses this way: a mistake the case cannot tell from the truth is one whose score is
within a few tolerances of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness import reference
from harness.compare import Tolerance, effective_ratio, tol_ratios, within
from harness.data import Inputs
from harness.errors import HarnessError
from harness.layouts.base import Layout
from harness.mistakes.budget import Budget
from harness.mistakes.misreadings import Catalogue, catalogue
from harness.mistakes.mistake import STAGE_RESHAPE, Mistake, Trial
from harness.params import Canonical
from harness.spec import Case

Hypothesis = tuple[Mistake, ...]


def hypothesis_key(h: Hypothesis) -> tuple[str, ...]:
    """The same mistakes in any order are the same hypothesis."""
    return tuple(sorted(m.id for m in h))


def compatible(h: Hypothesis, m: Mistake) -> bool:
    """Whether ``m`` can join ``h``: no two mistakes of one hypothesis act on the same slot."""
    return all(x.slot != m.slot for x in h)

@dataclass
class Score:
    """Divergence of one hypothesis from the expected outputs, in units of the tolerance."""

    ok: bool
    lead: int  # leading exact steps (in each direction's reading order), summed over directions
    mean_log: float  # mean log10 of the tolerance ratios (clipped at 1e-3): progress measure
    worst: float  # largest tolerance ratio
    y_abs: np.ndarray  # [directions, T] max abs error of y per step
    y_ratio: np.ndarray  # [directions, T] tolerance ratio per step
    states: dict[str, float]  # max abs error of h_n / c_n

    @property
    def rank(self) -> tuple[float, float]:
        return (-self.lead, self.mean_log)


class Scorer:
    """Evaluates hypotheses (tuples of mistakes) against the expected outputs; ``budget``
    counts them (and, for a search, holds its time allowance)."""

    def __init__(self, case: Case, layout: Layout, native: dict[str, np.ndarray], inputs: Inputs,
                 expected: dict[str, np.ndarray], tol: Tolerance,
                 budget: Budget | None = None) -> None:
        if case.cell not in layout.cells:
            raise HarnessError(f"layout {layout.name!r} has no {case.cell.upper()}")
        self.case, self.layout, self.inputs, self.expected, self.tol = (
            case, layout, inputs, expected, tol)
        self.native = {k: np.asarray(v, dtype=np.float64) for k, v in native.items()}
        self.claimed = layout.from_native(self.native, case).tensors
        self.catalogue: Catalogue = catalogue(case, layout)
        self.budget = budget if budget is not None else Budget()
        self._floor = self._noise_floor()

    def _noise_floor(self) -> dict[str, np.ndarray] | None:
        """The claimed weights' noise floor (the reference in the case dtype's arithmetic,
        against the float64 reference), per row as the score reads it: y [K, T], h_n, c_n
        whole. A lower-precision framework's correct outputs sit a few floors from the
        reference on trained weights, beyond a bare atol (``harness.compare.within``)."""
        if getattr(self.tol, "floor_factor", None) is None:
            return None
        canonical, case = Canonical(self.claimed), self.case
        ref = reference.run(case, canonical, self.inputs).named()
        low = reference.run(case, canonical, self.inputs, dtype=case.dtype).named()
        K, F = case.num_directions, case.out_size
        floor = {"y": np.abs(low["y"] - ref["y"]).reshape(case.batch, case.seq_len, K, F)
                 .max(axis=(0, 3)).T}
        for name in ("h_n", "c_n"):
            if name in ref:
                floor[name] = np.abs(low[name] - ref[name]).max()
        return floor

    def _ratio(self, tol_ratio: np.ndarray, err: np.ndarray | float, name: str,
               row: int | None = None) -> np.ndarray:
        """``tol_ratio`` as :func:`harness.compare.effective_ratio` of it and the noise floor
        of ``name`` (row ``row`` of y's floor; as is where the floor rule does not apply)."""
        if self._floor is None:
            return tol_ratio
        floor = self._floor[name] if row is None else self._floor[name][row]
        with np.errstate(divide="ignore", invalid="ignore"):
            floor_ratio = np.asarray(err) / floor
        return effective_ratio(tol_ratio, floor_ratio, self.tol.floor_factor)

    # Applying and running ----------------------------------------------------------------------
    def trial(self, hyp: Hypothesis) -> Trial:
        tr = Trial(native=self.native, canonical=None, case=self.case)
        ordered = sorted(hyp, key=lambda m: m.stage)
        for m in ordered:
            if m.stage == STAGE_RESHAPE:
                m.apply(tr)
        tr.canonical = (self.claimed if tr.native is self.native
                        else self.layout.from_native(tr.native, self.case).tensors)
        for m in ordered:
            if m.stage != STAGE_RESHAPE:
                m.apply(tr)
        return tr

    def outputs(self, tr: Trial) -> dict[str, np.ndarray]:
        case, inp = tr.case, self.inputs
        x, h0, c0 = inp.x, inp.h0, inp.c0
        if tr.swap_states:
            h0, c0 = c0, h0
        if tr.time_major:  # the framework's batch axis is our time axis, and vice versa
            x = x.transpose(1, 0, 2)
            h0 = np.zeros((h0.shape[0], x.shape[0], h0.shape[2]))
            c0 = None if c0 is None else np.zeros((c0.shape[0], x.shape[0], c0.shape[2]))
            case = case.model_copy(update={"batch": x.shape[0], "seq_len": x.shape[1]})
        out = reference.run(case, Canonical(tr.canonical), Inputs(x, h0, c0, inp.seq_lengths))
        if tr.time_major:
            return {"y": out.y.transpose(1, 0, 2)}
        return out.named()

    def evaluate(self, hyp: Hypothesis) -> Score:
        self.budget.count()
        return self.score(self.outputs(self.trial(hyp)))

    def score(self, named: dict[str, np.ndarray]) -> Score:
        case, tol = self.case, self.tol
        B, T = case.batch, case.seq_len
        K, F = case.num_directions, case.out_size
        ye = self.expected["y"]
        err = np.abs(named["y"] - ye)
        ratio = tol_ratios(named["y"], ye, tol)
        y_abs = err.reshape(B, T, K, F).max(axis=(0, 3)).T
        y_ratio = self._ratio(ratio.reshape(B, T, K, F).max(axis=(0, 3)).T, y_abs, "y")
        states, ratios = {}, [y_ratio.ravel()]
        for name in ("h_n", "c_n"):
            want = self.expected.get(name)
            if want is not None and name in named and named[name].shape == want.shape:
                states[name] = float(np.abs(named[name] - want).max())
                ratios.append(self._ratio(tol_ratios(named[name], want, tol).ravel(),
                                          np.abs(named[name] - want).ravel(), name))
        allr = np.concatenate(ratios)
        lead = 0
        for k, d in enumerate(case.directions):
            seq = y_ratio[k] if d == 0 else y_ratio[k][::-1]
            bad = np.nonzero(~within(seq))[0]
            lead += int(bad[0]) if bad.size else T
        worst = float(allr.max())
        return Score(ok=bool(within(worst)), lead=lead,
                     mean_log=float(np.log10(np.maximum(allr, 1e-3)).mean()), worst=worst,
                     y_abs=y_abs, y_ratio=y_ratio, states=states)
