"""The staged search over the catalogue of mistakes (:mod:`harness.mistakes`).

The claim is scored first, then each single mistake. In a stack of several layers or directions
the mistakes confined to one layer and direction are searched layer by layer
(:class:`~harness.doctor.local.LayerSearch`). Mistakes that cannot act at t=0 (the recurrent
side from a zero state, a forget offset from c0 = 0) are set aside while the first step is
wrong: the first step is run alone (one step from the initial state, cheap) to find the
input-side hypotheses that make it exact, gate orders included; the recurrent side is then
searched on the full sequence. A beam over full runs takes what the stages cannot reach.
"""

from __future__ import annotations

import itertools

import numpy as np

from harness import reference
from harness.compare import Tolerance, tol_ratios, within
from harness.data import Inputs
from harness.doctor.findings import Finding
from harness.doctor.local import LayerSearch
from harness.layouts.base import Layout
from harness.mistakes.budget import Budget
from harness.mistakes.mistake import Mistake
from harness.mistakes.scoring import Hypothesis, Score, compatible
from harness.params import Canonical
from harness.spec import Case

BEAM_WIDTH = 8
MAX_FIXERS = 24


class Doctor(LayerSearch):
    """Searches the hypotheses (tuples of mistakes) that reproduce the expected outputs: the
    first step alone where it can be run alone, layer by layer in a stack, then a beam."""

    def __init__(self, case: Case, layout: Layout, native: dict[str, np.ndarray], inputs: Inputs,
                 expected: dict[str, np.ndarray], tol: Tolerance,
                 budget: Budget | None = None) -> None:
        super().__init__(case, layout, native, inputs, expected, tol, budget)
        self._step0 = self._step0_parts()
        self._step0_claim: list[np.ndarray] | None = None

    # One step from the initial state -----------------------------------------------------------
    def _step0_parts(self) -> list[tuple[int, np.ndarray, slice]] | None:
        """(direction, time index per sequence, feature slice) of each direction's first step;
        None when a first step depends on more than one input step (bidirectional stacks)."""
        case = self.case
        if case.num_layers > 1 and case.num_directions > 1:
            return None
        F, lengths = case.out_size, self.inputs.lengths
        parts = []
        for k, d in enumerate(case.directions):
            t_idx = np.zeros_like(lengths) if d == 0 else lengths - 1
            parts.append((d, t_idx, slice(k * F, (k + 1) * F)))
        return parts

    def step0(self, hyp: Hypothesis) -> list[np.ndarray] | None:
        """Each direction's first-step y under ``hyp`` (None if it cannot be run alone)."""
        if self._step0 is None or any(m.family == "data" and m.id != "data:h0-c0" for m in hyp):
            return None
        self.budget.count()
        tr = self.trial(hyp)
        inp, case = self.inputs, tr.case
        h0, c0 = (inp.c0, inp.h0) if tr.swap_states else (inp.h0, inp.c0)
        rows = np.arange(case.batch)
        outs = []
        for k, (d, t_idx, _) in enumerate(self._step0):
            sub = case.model_copy(update={
                "direction": "forward" if d == 0 else "reverse", "bidirectional": None,
                "seq_len": 1, "seq_lengths": None})
            s = slice(None) if case.num_directions == 1 else slice(k, k + 1)
            x = inp.x[rows, t_idx][:, None]
            out = reference.run(sub, Canonical(tr.canonical),
                                Inputs(x, h0[s], None if c0 is None else c0[s], None))
            outs.append(out.y[:, 0])
        return outs

    def step0_ratio(self, outs: list[np.ndarray]) -> float:
        rows = np.arange(self.case.batch)
        worst = 0.0
        for (_, t_idx, fs), y in zip(self._step0, outs, strict=True):
            e = self.expected["y"][rows, t_idx, fs]
            worst = max(worst, float(tol_ratios(y, e, self.tol).max()))
        return worst

    def acts_at_step0(self, m: Mistake) -> bool:
        if self._step0 is None:
            return True
        if self._step0_claim is None:
            self._step0_claim = self.step0(())
        outs = self.step0((m,))
        if outs is None:
            return True
        return any(not np.allclose(a, b, rtol=0, atol=1e-13)
                   for a, b in zip(outs, self._step0_claim, strict=True))

    def search(self, budget_s: float = 60.0) -> tuple[list[Finding], list[Finding]]:
        """(hypotheses that reproduce the expected outputs, simplest first; closest misses)."""
        self.budget.restart(budget_s)
        singles = list(self.catalogue.mistakes)
        ev = _Trials(self, singles)
        claim = ev(())
        if claim.ok:
            return ev.found, []
        for m in singles:
            ev((m,))
        if ev.found:
            return self._simplest(ev.found), []
        for stage in (self._search_layers, self._search_first_step, self._search_beam):
            matches = stage(ev, singles)
            if matches:
                return matches, []
        closest = sorted(self._as_hyps(ev.tried, ev.known), key=lambda hs: hs[1].rank)
        return [], [Finding(h, s) for h, s in closest[:3] if h]

    def _search_layers(self, ev: _Trials, singles: list[Mistake]) -> list[Finding] | None:
        """A mistake in one layer or direction only: layer by layer where the final states
        allow; with only y, the lower layers jointly, then the last layer alone."""
        if self.case.num_layers * self.case.num_directions == 1:
            return None
        if self.per_layer_possible():
            return self._whole_fix(self.search_local())
        self.search_joint(ev)
        if ev.found:
            return self._simplest(ev.found)
        return self._whole_fix(self.search_local(first=self.case.num_layers - 1))

    def _whole_fix(self, fix: Hypothesis | None) -> list[Finding] | None:
        """The layer-by-layer fix judged on the whole stack (recorded in :attr:`local`)."""
        if fix is None:
            return None
        s = self.evaluate(fix)
        self.local.whole_ok = s.ok
        return [self._collapse(Finding(fix, s))] if s.ok else None

    def _search_first_step(self, ev: _Trials, singles: list[Mistake]) -> list[Finding] | None:
        """Input-side hypotheses that make the first step exact, then the mistakes that cannot
        act at t=0 on top of them (one, then two) on the full sequence."""
        if self._step0 is None:
            return None
        acting = [m for m in singles if m.family != "data" and self.acts_at_step0(m)]
        quiet = [m for m in singles if m.family != "data" and m not in acting]
        fixers = self._fix_step0(acting)
        for size in sorted({len(f) for f in fixers}):
            for f in [f for f in fixers if len(f) == size][:MAX_FIXERS]:
                ev(f)
                for m in quiet:
                    if compatible(f, m):
                        ev(f + (m,))
            if ev.found:
                return self._simplest(ev.found)
        for f in fixers[:MAX_FIXERS]:  # two recurrent-side mistakes on top of a fixer
            for a, b in itertools.combinations(quiet, 2):
                if self.budget.stop_if_expired():  # incomplete: the report says so
                    break
                if compatible(f, a) and compatible(f + (a,), b):
                    ev(f + (a, b))
            if ev.found:
                return self._simplest(ev.found)
        return None

    def _search_beam(self, ev: _Trials, singles: list[Mistake]) -> list[Finding] | None:
        """Data mistakes and anything the staged search could not reach: a beam on full runs
        from the closest hypotheses tried, two steps deep."""
        for m in [m for m in singles if m.family == "data"]:
            for m2 in singles:
                if compatible((m,), m2):
                    ev((m, m2))
        if not ev.found:
            frontier = sorted(((h, s) for h, s in self._as_hyps(ev.tried, ev.known)
                               if h and not any("@" in m.id for m in h)),
                              key=lambda hs: hs[1].rank)[:BEAM_WIDTH]
            for _ in range(2):
                nxt = []
                for h, _s in frontier:
                    for m in singles:
                        if self.budget.stop_if_expired():
                            break
                        if compatible(h, m):
                            s = ev(h + (m,))
                            if s is not None:
                                nxt.append((h + (m,), s))
                if ev.found or not nxt:
                    break
                frontier = sorted(nxt, key=lambda hs: hs[1].rank)[:BEAM_WIDTH]
        return self._simplest(ev.found) if ev.found else None

    def _fix_step0(self, acting: list[Mistake]) -> list[Hypothesis]:
        """Hypotheses of input-side mistakes whose first step matches, smallest first."""
        claim = self.step0(())
        if within(self.step0_ratio(claim)):
            return [()]
        scored: list[tuple[float, Hypothesis]] = []
        fixers: list[Hypothesis] = []
        for m in acting:
            r = self.step0_ratio(self.step0((m,)))
            scored.append((r, (m,)))
            if within(r):
                fixers.append((m,))
        if fixers:
            return fixers
        pairs: list[tuple[float, Hypothesis]] = []
        for a, b in itertools.combinations(acting, 2):
            if self.budget.expired(share=0.5):
                break
            if a.slot == b.slot:
                continue
            r = self.step0_ratio(self.step0((a, b)))
            pairs.append((r, (a, b)))
            if within(r):
                fixers.append((a, b))
        if fixers:
            return fixers
        frontier = [h for _, h in sorted(pairs, key=lambda rh: rh[0])[:BEAM_WIDTH]]
        for h in frontier:
            for m in acting:
                if compatible(h, m) and within(self.step0_ratio(self.step0(h + (m,)))):
                    fixers.append(h + (m,))
        return fixers

    @staticmethod
    def _as_hyps(tried: dict, by_id: dict[str, Mistake]) -> list[tuple[Hypothesis, Score]]:
        return [(tuple(by_id[i] for i in ids), s) for ids, s in tried.items()]

    def _simplest(self, found: list[Finding]) -> list[Finding]:
        """Matches, fewest mistakes first, equivalent corrections (same weights) merged."""
        found = sorted(found, key=lambda f: (len(f.hypothesis), f.score.worst))
        out, seen = [], []
        for f in found:
            tr = self.trial(f.hypothesis)
            sig = (tr.case.reset_after, tr.case.recurrent_activation, tr.time_major, tr.swap_states)
            if any(sig == s and _same(tr.canonical, c) for s, c in seen):
                continue
            seen.append((sig, tr.canonical))
            out.append(f)
        return out


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


class _Trials:
    """The hypotheses one search has tried (ids -> score), the mistakes they name and those
    that reproduce the expected outputs (``found``). Called with a hypothesis: its score, or
    None where it was tried already or the budget is spent (the search is then incomplete, and
    says so)."""

    def __init__(self, doctor: Doctor, singles: list[Mistake]) -> None:
        self.doctor = doctor
        self.tried: dict[tuple[str, ...], Score] = {}
        self.known: dict[str, Mistake] = {m.id: m for m in singles}
        self.found: list[Finding] = []

    def __call__(self, hyp: Hypothesis) -> Score | None:
        ids = tuple(sorted(m.id for m in hyp))
        if ids in self.tried:
            return None
        if hyp and self.doctor.budget.stop_if_expired():
            return None
        s = self.doctor.evaluate(hyp)
        self.tried[ids] = s
        self.known.update((m.id, m) for m in hyp)
        if s.ok:
            self.found.append(Finding(hyp, s))
        return s
