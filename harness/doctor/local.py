"""The search for mistakes confined to one layer and direction (a hand port's mistake is often
in one tensor of one layer): each layer's final states depend only on it and the layers below,
so layer 0 is fixed direction by direction first, then layer 1 on what the fixed layer 0 gives
it, and so on (:meth:`LayerSearch.search_local`). With only y the lower layers cannot be judged
alone (:meth:`LayerSearch.search_joint` says what is searched instead)."""

from __future__ import annotations

import itertools

import numpy as np

from harness.compare import tol_ratios, within
from harness.data import Inputs
from harness.doctor.findings import Finding, LocalSearch, Place
from harness.doctor.fit import least_squares
from harness.mistakes.local import local_catalogue, scoped, swap_layer_directions, where
from harness.mistakes.mistake import Mistake
from harness.mistakes.scoring import Hypothesis, Scorer, compatible, hypothesis_key
from harness.mistakes.value_families import missing_bias_half
from harness.params import Canonical, key, layer_dirs
from harness.reference.functions import FLOAT64
from harness.reference.layers import CELLS, reading_order

# one layer and direction alone runs in a fraction of the whole stack's time: the pairs there
# grow from more of the nearest singles (two gate orders in one direction need 16)
LOCAL_BEAM_WIDTH = 16
# Levenberg-Marquardt steps of a bias half fitted to one layer and direction
FIT_STEPS = 10


class LayerSearch(Scorer):
    """A :class:`~harness.mistakes.scoring.Scorer` that searches layer by layer; what it did is
    recorded in :attr:`local`."""

    local: LocalSearch | None = None

    def per_layer_possible(self) -> bool:
        """Whether each layer can be judged alone: its final states are in the expected outputs
        (h_n; the last layer has y too). A one-layer case needs only y."""
        return self.case.num_layers == 1 or "h_n" in self.expected

    def _direction(self, canonical: dict[str, np.ndarray], layer: int, k: int,
                   layer_in: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(y [B, T, F] in input time order, h, c) of one layer and direction on ``layer_in``,
        as :func:`harness.reference.layers.forward` runs it."""
        case, inp = self.case, self.inputs
        d = case.directions[k]
        valid, order = reading_order(Inputs(layer_in, inp.h0, inp.c0, inp.seq_lengths))
        s = layer * case.num_directions + k
        y, h, c = CELLS[case.cell](case, Canonical(canonical).block(layer, d), order(layer_in, d),
                                   valid, inp.h0[s], None if inp.c0 is None else inp.c0[s],
                                   FLOAT64)
        return order(y, d), h, c

    def _layer_input(self, canonical: dict[str, np.ndarray], layer: int) -> np.ndarray:
        """What ``layer`` reads when the layers below it hold ``canonical``."""
        layer_in = self.inputs.x
        for la in range(layer):
            layer_in = np.concatenate([self._direction(canonical, la, k, layer_in)[0]
                                       for k in range(self.case.num_directions)], axis=-1)
        return layer_in

    def _place_score(self, out: tuple[np.ndarray, np.ndarray, np.ndarray | None], layer: int,
                     k: int) -> tuple[bool, float]:
        """(within tolerance, mean log10 tolerance ratio) of one layer and direction: its final
        states against h_n / c_n, and (last layer) its half of y, step by step."""
        case, tol, want = self.case, self.tol, self.expected
        y, h, c = out
        s = layer * case.num_directions + k
        ratios = []
        for name, got in (("h_n", h), ("c_n", c)):
            if got is not None and name in want:
                err = np.abs(got - want[name][s])
                ratios.append(self._ratio(tol_ratios(got, want[name][s], tol), err, name).ravel())
        if layer == case.num_layers - 1:
            F = case.out_size
            ye = want["y"][:, :, k * F:(k + 1) * F]
            y_abs = np.abs(y - ye).max(axis=(0, 2))
            ratios.append(self._ratio(tol_ratios(y, ye, tol).max(axis=(0, 2)), y_abs, "y", k))
        allr = np.concatenate(ratios)
        return (bool(within(allr.max())),
                float(np.log10(np.maximum(allr, 1e-3)).mean()))

    def _place_residual(self, out: tuple[np.ndarray, np.ndarray, np.ndarray | None],
                        layer: int, k: int) -> np.ndarray:
        """What :meth:`_place_score` judges, as differences: the final states of one layer and
        direction and (last layer) its half of y."""
        case, want = self.case, self.expected
        y, h, c = out
        s = layer * case.num_directions + k
        parts = [(got - want[name][s]).ravel() for name, got in (("h_n", h), ("c_n", c))
                 if got is not None and name in want]
        if layer == case.num_layers - 1:
            F = case.out_size
            parts.append((y - want["y"][:, :, k * F:(k + 1) * F]).ravel())
        return np.concatenate(parts)

    def _search_place(self, base: Hypothesis, layer: int, k: int, swapped: bool,
                      singles: list[Mistake], layer_in: np.ndarray, out_of_time
                      ) -> tuple[list[Hypothesis], int, bool]:
        """Hypotheses confined to one layer and direction that reproduce its outputs, given the
        lower layers' fix ``base`` (simplest first), the number tried, whether time ran out.
        Singles; then pairs grown from the singles nearest by the mean tolerance ratio; then
        every other pair, nearest first (a hand port's two mistakes need not both be near);
        then, where the file holds a bias half of zeros, that half fitted to the outputs on top
        of the claim or of each single, nearest first."""
        move = (swap_layer_directions(layer, self.case),) if swapped else ()
        tried = 0

        def ev(hyp: Hypothesis) -> tuple[bool, float]:
            nonlocal tried
            tried += 1
            self.budget.count()
            tr = self.trial(base + move + hyp)
            return self._place_score(self._direction(tr.canonical, layer, k, layer_in), layer, k)

        if ev(())[0]:
            return [()], tried, False
        found: list[Hypothesis] = []
        rank: dict[str, float] = {}
        seen: set[tuple[str, ...]] = set()
        for m in singles:
            if out_of_time():
                return found, tried, True
            ok, rank[m.id] = ev((m,))
            if ok:
                found.append((m,))
        if found:
            return found, tried, False
        nearest = sorted(singles, key=lambda m: rank[m.id])
        for h in nearest[:LOCAL_BEAM_WIDTH]:  # pairs grown from the nearest singles
            for m in singles:
                if not compatible((h,), m) or hypothesis_key((h, m)) in seen:
                    continue
                seen.add(hypothesis_key((h, m)))
                if out_of_time():
                    return found, tried, True
                if ev((h, m))[0]:
                    found.append((h, m))
        if found:
            return found, tried, False
        rest = sorted(((a, b) for a, b in itertools.combinations(nearest, 2)
                       if compatible((a,), b) and hypothesis_key((a, b)) not in seen),
                      key=lambda ab: rank[ab[0].id] + rank[ab[1].id])
        for pair in rest:
            if out_of_time():
                return found, tried, True
            if ev(pair)[0]:
                return [pair], tried, False
        if not swapped:
            for h in [(), *((m,) for m in nearest)]:
                if out_of_time():
                    return found, tried, True
                fitted = self._fit_zero_bias(base + h, layer, k, layer_in)
                tried += 1
                if fitted is not None:
                    return [h + (fitted,)], tried, False
        return found, tried, False

    def _fit_zero_bias(self, hyp: Hypothesis, layer: int, k: int,
                       layer_in: np.ndarray) -> Mistake | None:
        """The bias half of one layer and direction that the file holds as zeros (``bR`` or
        ``bW``: a port that dropped ``bias_hh``), fitted to that place's outputs on top of
        ``hyp``: the confined :func:`~harness.mistakes.value_families.missing_bias_half` that
        reproduces them, or None. Only where the outputs judged there hold at least twice as
        many values as the half has (else any outputs could be fitted)."""
        case = self.case
        d = case.directions[k]
        canonical = self.trial(hyp).canonical
        H = case.hidden_size
        for half in ("bR", "bW"):
            keys = [key(layer, d, f"{half}_{g}") for g in case.gates]
            if any(np.any(self.claimed[n]) for n in keys):
                continue
            n = len(keys) * H

            def resid(theta: np.ndarray, keys=keys) -> np.ndarray:
                c = dict(canonical)
                for i, name in enumerate(keys):
                    c[name] = canonical[name] + theta[i * H:(i + 1) * H]
                self.budget.count()
                return self._place_residual(self._direction(c, layer, k, layer_in), layer, k)

            if resid(np.zeros(n)).size < 2 * n:
                continue
            # a bias enters the gates' pre-activations linearly: the right hypothesis
            # converges in a few steps, so a short fit screens every single cheaply
            theta = least_squares(resid, n, self.budget, iterations=FIT_STEPS)
            c = dict(canonical)
            for i, name in enumerate(keys):
                c[name] = canonical[name] + theta[i * H:(i + 1) * H]
            if self._place_score(self._direction(c, layer, k, layer_in), layer, k)[0]:
                delta = {name: theta[i * H:(i + 1) * H] for i, name in enumerate(keys)}
                return scoped(missing_bias_half(case, delta), layer, d, case, {})
        return None

    def search_local(self, first: int = 0) -> Hypothesis | None:
        """The layer-by-layer search (recorded in :attr:`local`): fix layer 0 direction by
        direction on its final states, then layer 1 on what the fixed layer 0 gives it, and so
        on. Each layer is first searched with its own directions' weights, and with the two
        swapped where that already fits more directions. Returns the whole fix (the lower
        layers' and every direction's mistakes together), or None. ``first`` > 0: the layers
        below it are taken as claimed (only y: the last layer alone)."""
        case = self.case
        D, L = case.num_directions, case.num_layers
        if first == 0 or self.local is None:
            self.local = LocalSearch("per-layer" if first == 0 else "y-only")
        local = self.local
        confined = local_catalogue(case, self.layout, self.catalogue)

        def out_of_time() -> bool:
            if self.budget.stop_if_expired():
                local.stopped = True
            return local.stopped

        fix: Hypothesis = ()
        for layer in range(first, L):
            layer_in = self._layer_input(self.trial(fix).canonical, layer)
            options = [False]
            if D == 2:  # the swap first where it already makes more directions exact
                swap = swap_layer_directions(layer, case)
                exact = {sw: sum(self._place_score(self._direction(
                    self.trial(fix + ((swap,) if sw else ())).canonical, layer, k, layer_in),
                    layer, k)[0] for k in range(D)) for sw in (False, True)}
                self.budget.count(2 * D)
                local.tried += 2 * D
                options = sorted((False, True), key=lambda sw: -exact[sw])
            done, failed = False, []
            for sw in options:
                places: list[Place] = []
                for k, d in enumerate(case.directions):
                    if local.stopped or (sw and places and places[-1].status == "no fix"):
                        break  # a swap must fit both directions
                    src = 1 - d if sw else d
                    hyps, n, stopped = self._search_place(fix, layer, k, sw, confined[(layer, src)],
                                                          layer_in, out_of_time)
                    local.tried += n
                    if not hyps:
                        places.append(Place(layer, d, "stopped" if stopped else "no fix", (), n,
                                            sw))
                        continue
                    best = min(hyps, key=len)
                    places.append(Place(layer, d, "exact" if not best and not sw else "fixed",
                                        best, n, sw))
                    whole = self._everywhere(best, sw)
                    if whole is not None and not fix and self.evaluate(whole).ok:
                        local.places += places
                        local.everywhere = where(layer, d, case)
                        return whole
                if len(places) == D and all(p.status in ("exact", "fixed") for p in places):
                    fix += ((swap_layer_directions(layer, case),) if sw else ()) + tuple(
                        m for p in places for m in p.mistakes)
                    local.places += places
                    done = True
                    break
                failed += places
                if local.stopped:
                    break
            if not done:
                local.places += failed
                searched = {(p.layer, p.direction) for p in local.places}
                local.places += [Place(la, d, "stopped" if la == layer else "not searched")
                                 for la, d in layer_dirs(case)
                                 if (la, d) not in searched and la >= layer]
                return None
        return fix

    def _everywhere(self, hyp: Hypothesis, swapped: bool) -> Hypothesis | None:
        """The mistakes confined in ``hyp`` made in every layer and direction (None where
        that is ``hyp`` or was tried already: one mistake alone)."""
        by_id = {m.id: m for m in self.catalogue.mistakes}
        if any(m.id.split("@")[0] not in by_id for m in hyp):
            return None  # a fitted bias half holds values of its own place only
        whole = tuple(by_id[m.id.split("@")[0]] for m in hyp)
        if swapped and "swap:directions" in by_id:
            whole += (by_id["swap:directions"],)
        return whole if len(whole) > 1 else None

    def _collapse(self, f: Finding) -> Finding:
        """A fix made of the same confined mistakes in every layer and direction (and the
        directions swapped in every layer or none) as those mistakes made everywhere, where
        that reproduces the outputs too: the simpler account."""
        case = self.case
        per: dict[tuple[int, int], set[str]] = {ld: set() for ld in layer_dirs(case)}
        swaps = set()
        for m in f.hypothesis:
            base, _, at = m.id.partition("@")
            if base == "swap:directions":
                swaps.add(int(at))
            elif at:
                per[(int(at[:-1]), "fb".index(at[-1]))].add(base)
        sets = list(per.values())
        by_id = {m.id: m for m in self.catalogue.mistakes}
        if (len(swaps) not in (0, case.num_layers) or any(x != sets[0] for x in sets)
                or not sets[0] <= by_id.keys()):
            return f
        whole = tuple(by_id[i] for i in sorted(sets[0]))
        if swaps:
            whole += (by_id["swap:directions"],)
        s = self.evaluate(whole)
        return Finding(whole, s) if s.ok else f

    def search_joint(self, ev) -> None:
        """Without h_n a layer below the last cannot be judged alone: each single mistake
        confined to one of those layers and one direction, and each one's swapped directions,
        judged on y of the whole stack (recorded in :attr:`local`; the last layer is then
        searched alone, :meth:`search_local`)."""
        case = self.case
        local = self.local = LocalSearch("y-only")
        before = self.budget.evaluated
        confined = local_catalogue(case, self.layout, self.catalogue)
        lower = range(case.num_layers - 1)
        hyps: list[Hypothesis] = []
        if case.num_directions == 2:
            hyps += [(swap_layer_directions(la, case),) for la in lower]
        hyps += [(m,) for la, d in layer_dirs(case) if la in lower for m in confined[(la, d)]]
        for h in hyps:
            if self.budget.stop_if_expired():
                local.stopped = True
                break
            ev(h)
        local.joint = self.budget.evaluated - before
        local.note = (f"{len(hyps)} single mistakes, each confined to one layer below the last "
                      "and one direction (or that layer's directions swapped)")
