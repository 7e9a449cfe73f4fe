"""The layout doctor: which misreading of a weights file reproduces the outputs someone got.

Inputs: a case (sizes, semantics, input data), a weights file read through a CLAIMED layout,
and the outputs the weights really produce: an ``OUT.npz`` (``y``, optionally ``h_n``,
``c_n``), or ``--adapter NAME``, whose framework is then the source of truth: the adapter runs
the same file read as *its own* layout, and the doctor diagnoses how the claimed layout misreads
it. (With the adapter's own layout claimed, the doctor checks the layout description itself.)

1. The claim is run through the float64 reference and its per-timestep divergence is explained
   (docs/layouts.md, "Reading a divergence signature").
2. The plausible mistakes (:mod:`harness.mistakes`), each a transformation of the claimed
   reading, are searched, pruned by the signature: mistakes that cannot act at t=0 (the
   recurrent side from a zero state, a forget offset from c0 = 0) are set aside while the
   first step is wrong; the first step is run alone (one step from the initial state, cheap)
   to find the input-side hypotheses that make it exact, gate orders included; the recurrent
   side is then searched on the full sequence. Before that, in a stack of several layers or
   directions, the mistakes confined to one layer and direction are searched layer by layer
   (:meth:`Doctor.search_local`): each layer's final states (h_n, c_n) depend only on it and
   the layers below, so layer 0 is fixed direction by direction first, then layer 1 on what
   the fixed layer 0 gives it, and so on. With only y the lower layers cannot be judged alone
   (:meth:`Doctor.search_joint` says what is searched instead).
3. The transformation that reproduces the expected outputs is reported as a mapping table
   (claimed vs actual content of every slice) and as corrected weights in the claimed layout.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from tabulate import tabulate

from harness import reference
from harness.compare import Tolerance, effective_ratio, tol_ratios, tolerance_for, within
from harness.data import Inputs, output_shapes
from harness.errors import HarnessError, WeightsError
from harness.layouts.base import Layout
from harness.mistakes import (
    READINGS,
    STAGE_RESHAPE,
    Catalogue,
    Mistake,
    Trial,
    catalogue,
    kind_of,
    local_catalogue,
    missing_bias_half,
    read_slice,
    reading_name,
    swap_layer_directions,
    where,
)
from harness.params import DIRECTION_NAMES, Canonical, block_shapes, key, layer_dirs
from harness.reference.functions import FLOAT64
from harness.reference.layers import CELLS, reading_order
from harness.spec import Case

Hypothesis = tuple[Mistake, ...]
BEAM_WIDTH = 8
# one layer and direction alone runs in a fraction of the whole stack's time: the pairs there
# grow from more of the nearest singles (two gate orders in one direction need 16)
LOCAL_BEAM_WIDTH = 16
MAX_FIXERS = 24
# A hypothesis that misses is shown as a near miss only within this many tolerances: one at
# 1e4x tolerance is no nearer the truth than any other, and would mislead.
NEAR_MISS = 10.0


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


@dataclass
class Finding:
    hypothesis: Hypothesis
    score: Score


@dataclass
class Place:
    """What the layer-by-layer search found at one layer and direction."""

    layer: int
    direction: int
    status: str  # exact | fixed | no fix | stopped | not searched
    mistakes: Hypothesis = ()
    tried: int = 0  # hypotheses evaluated on this layer and direction alone
    swapped: bool = False  # its weights are read from the other direction's slot


@dataclass
class LocalSearch:
    """The search for mistakes confined to one layer and direction. ``mode``: ``per-layer``
    (each layer judged alone on its final states, y for the last: the expected outputs hold
    h_n) or ``y-only`` (no final states: the last layer judged alone on y, the lower ones as
    claimed; then each confined single mistake judged on y of the whole stack, ``joint``)."""

    mode: str
    places: list[Place] = field(default_factory=list)
    tried: int = 0
    stopped: bool = False
    note: str = ""  # only y: what the joint search tried
    joint: int = 0  # only y: confined single mistakes judged on y of the whole stack
    everywhere: str = ""  # where the mistake found is made in every layer and direction
    whole_ok: bool | None = None  # whether the composed fix reproduces every expected output


@dataclass
class Diagnosis:
    case: Case
    layout: Layout
    source: str  # where the expected outputs came from
    claim: Score
    signature: list[str]
    found: list[Finding]
    closest: list[Finding]
    noops: list[tuple[str, str]]
    evaluated: int = 0
    seconds: float = 0.0
    stopped: bool = False  # the time budget ran out before the search was complete
    fixed: dict[str, np.ndarray] | None = None
    fixed_case: Case | None = None
    fixed_error: float | None = None
    mapping: list[dict[str, str]] = field(default_factory=list)
    local: LocalSearch | None = None

    @property
    def best(self) -> Finding | None:
        return self.found[0] if self.found else None


def load_expected(path: str, case: Case) -> dict[str, np.ndarray]:
    """``y`` (required), ``h_n``, ``c_n`` from an outputs file, shapes checked against the case."""
    from harness.npz import load_npz
    from harness.prepare import max_memory

    arrays = load_npz(path, what="expected outputs", max_bytes=max_memory())
    shapes = output_shapes(case)
    if "y" not in arrays:
        raise WeightsError("missing tensor y", file=path, field="y")
    out = {}
    for name, shape in shapes.items():
        if name not in arrays:
            continue
        a = np.asarray(arrays[name])
        if tuple(a.shape) != shape:
            raise WeightsError(f"expected shape {list(shape)}, got {list(a.shape)}", file=path,
                               field=name)
        if not np.issubdtype(a.dtype, np.floating) or not np.isfinite(a).all():
            raise WeightsError("expected finite floating-point values", file=path, field=name)
        out[name] = a.astype(np.float64)
    return out


class Doctor:
    """Evaluates hypotheses (tuples of mistakes) against the expected outputs."""

    def __init__(self, case: Case, layout: Layout, native: dict[str, np.ndarray], inputs: Inputs,
                 expected: dict[str, np.ndarray], tol: Tolerance) -> None:
        if case.cell not in layout.cells:
            raise HarnessError(f"layout {layout.name!r} has no {case.cell.upper()}")
        self.case, self.layout, self.inputs, self.expected, self.tol = (
            case, layout, inputs, expected, tol)
        self.native = {k: np.asarray(v, dtype=np.float64) for k, v in native.items()}
        self.claimed = layout.from_native(self.native, case).tensors
        self.catalogue: Catalogue = catalogue(case, layout)
        self.evaluated = 0
        self.stopped = False
        self._step0 = self._step0_parts()
        self._step0_claim: list[np.ndarray] | None = None
        self._floor = self._noise_floor()
        self.local: LocalSearch | None = None

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
        self.evaluated += 1
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
        self.evaluated += 1
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

    # Mistakes confined to one layer and direction ---------------------------------------------
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

    def _search_place(self, base: Hypothesis, layer: int, k: int, swapped: bool,
                      singles: list[Mistake], layer_in: np.ndarray, out_of_time
                      ) -> tuple[list[Hypothesis], int, bool]:
        """Hypotheses confined to one layer and direction that reproduce its outputs, given the
        lower layers' fix ``base`` (simplest first), the number tried, whether time ran out.
        Singles, then pairs grown from the singles nearest by the mean tolerance ratio."""
        move = (swap_layer_directions(layer, self.case),) if swapped else ()
        tried = 0

        def ev(hyp: Hypothesis) -> tuple[bool, float]:
            nonlocal tried
            tried += 1
            self.evaluated += 1
            tr = self.trial(base + move + hyp)
            return self._place_score(self._direction(tr.canonical, layer, k, layer_in), layer, k)

        if ev(())[0]:
            return [()], tried, False
        found: list[Hypothesis] = []
        frontier: list[tuple[float, Hypothesis]] = []
        seen: set[tuple[str, ...]] = set()
        for m in singles:
            if out_of_time():
                return found, tried, True
            ok, rank = ev((m,))
            if ok:
                found.append((m,))
            frontier.append((rank, (m,)))
        if not found:  # pairs grown from the nearest singles
            for _rank, h in sorted(frontier, key=lambda rh: rh[0])[:LOCAL_BEAM_WIDTH]:
                for m in singles:
                    if not _compatible(h, m) or _key(h + (m,)) in seen:
                        continue
                    seen.add(_key(h + (m,)))
                    if out_of_time():
                        return found, tried, True
                    if ev(h + (m,))[0]:
                        found.append(h + (m,))
        return found, tried, False

    def search_local(self, start: float, budget_s: float, first: int = 0) -> Hypothesis | None:
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
            if time.perf_counter() - start > budget_s:
                local.stopped = self.stopped = True
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
                self.evaluated += 2 * D
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
        if len(swaps) not in (0, case.num_layers) or any(x != sets[0] for x in sets):
            return f
        by_id = {m.id: m for m in self.catalogue.mistakes}
        whole = tuple(by_id[i] for i in sorted(sets[0]))
        if swaps:
            whole += (by_id["swap:directions"],)
        s = self.evaluate(whole)
        return Finding(whole, s) if s.ok else f

    def search_joint(self, ev, start: float, budget_s: float) -> None:
        """Without h_n a layer below the last cannot be judged alone: each single mistake
        confined to one of those layers and one direction, and each one's swapped directions,
        judged on y of the whole stack (recorded in :attr:`local`; the last layer is then
        searched alone, :meth:`search_local`)."""
        case = self.case
        local = self.local = LocalSearch("y-only")
        before = self.evaluated
        confined = local_catalogue(case, self.layout, self.catalogue)
        lower = range(case.num_layers - 1)
        hyps: list[Hypothesis] = []
        if case.num_directions == 2:
            hyps += [(swap_layer_directions(la, case),) for la in lower]
        hyps += [(m,) for la, d in layer_dirs(case) if la in lower for m in confined[(la, d)]]
        for h in hyps:
            if time.perf_counter() - start > budget_s:
                local.stopped = self.stopped = True
                break
            ev(h)
        local.joint = self.evaluated - before
        local.note = (f"{len(hyps)} single mistakes, each confined to one layer below the last "
                      "and one direction (or that layer's directions swapped)")

    # Search ------------------------------------------------------------------------------------
    def search(self, budget_s: float = 60.0) -> tuple[list[Finding], list[Finding]]:
        """(hypotheses that reproduce the expected outputs, simplest first; closest misses)."""
        start = time.perf_counter()
        singles = list(self.catalogue.mistakes)
        tried: dict[tuple[str, ...], Score] = {}
        known: dict[str, Mistake] = {m.id: m for m in singles}
        found: list[Finding] = []

        def ev(hyp: Hypothesis) -> Score | None:
            ids = tuple(sorted(m.id for m in hyp))
            if ids in tried:
                return None
            if hyp and time.perf_counter() - start > budget_s:
                self.stopped = True  # out of time: the search is incomplete, and says so
                return None
            s = self.evaluate(hyp)
            tried[ids] = s
            known.update((m.id, m) for m in hyp)
            if s.ok:
                found.append(Finding(hyp, s))
            return s

        claim = ev(())
        if claim.ok:
            return found, []
        for m in singles:
            ev((m,))
        if found:
            return self._simplest(found), []

        # a mistake in one layer or direction only: layer by layer where the final states allow
        if self.case.num_layers * self.case.num_directions > 1:
            if self.per_layer_possible():
                fix = self.search_local(start, budget_s)
                if fix is not None:
                    s = self.evaluate(fix)
                    self.local.whole_ok = s.ok
                    if s.ok:
                        return [self._collapse(Finding(fix, s))], []
            else:  # only y: the lower layers jointly, then the last layer alone
                self.search_joint(ev, start, budget_s)
                if found:
                    return self._simplest(found), []
                fix = self.search_local(start, budget_s, first=self.case.num_layers - 1)
                if fix is not None:
                    s = self.evaluate(fix)
                    self.local.whole_ok = s.ok
                    if s.ok:
                        return [self._collapse(Finding(fix, s))], []

        step_able = self._step0 is not None
        if step_able:
            acting = [m for m in singles if m.family != "data" and self.acts_at_step0(m)]
            quiet = [m for m in singles if m.family != "data" and m not in acting]
            fixers = self._fix_step0(acting, start, budget_s)
            for size in sorted({len(f) for f in fixers}):
                for f in [f for f in fixers if len(f) == size][:MAX_FIXERS]:
                    ev(f)
                    for m in quiet:
                        if _compatible(f, m):
                            ev(f + (m,))
                if found:
                    return self._simplest(found), []
            for f in fixers[:MAX_FIXERS]:  # two recurrent-side mistakes on top of a fixer
                for a, b in itertools.combinations(quiet, 2):
                    if time.perf_counter() - start > budget_s:
                        break
                    if _compatible(f, a) and _compatible(f + (a,), b):
                        ev(f + (a, b))
                if found:
                    return self._simplest(found), []
        # data mistakes and anything the staged search could not reach: a beam on full runs
        for m in [m for m in singles if m.family == "data"]:
            for m2 in singles:
                if _compatible((m,), m2):
                    ev((m, m2))
        if not found:
            frontier = sorted(((h, s) for h, s in self._as_hyps(tried, known)
                               if h and not any("@" in m.id for m in h)),
                              key=lambda hs: hs[1].rank)[:BEAM_WIDTH]
            for _ in range(2):
                nxt = []
                for h, _s in frontier:
                    for m in singles:
                        if time.perf_counter() - start > budget_s:
                            break
                        if _compatible(h, m):
                            s = ev(h + (m,))
                            if s is not None:
                                nxt.append((h + (m,), s))
                if found or not nxt:
                    break
                frontier = sorted(nxt, key=lambda hs: hs[1].rank)[:BEAM_WIDTH]
        if found:
            return self._simplest(found), []
        closest = sorted(self._as_hyps(tried, known), key=lambda hs: hs[1].rank)
        return [], [Finding(h, s) for h, s in closest[:3] if h]

    def _fix_step0(self, acting: list[Mistake], start: float, budget_s: float) -> list[Hypothesis]:
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
            if time.perf_counter() - start > budget_s / 2:
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
                if _compatible(h, m) and within(self.step0_ratio(self.step0(h + (m,)))):
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


def _key(h: Hypothesis) -> tuple[str, ...]:
    return tuple(sorted(m.id for m in h))


def _compatible(h: Hypothesis, m: Mistake) -> bool:
    return all(x.slot != m.slot for x in h)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# Explaining ------------------------------------------------------------------------------------

def explain(case: Case, inputs: Inputs, s: Score, expected: dict[str, np.ndarray]) -> list[str]:
    """The claim's per-timestep divergence signature in words.

    Each pitfall is described in words where it is named; its code (P1 ... P13) is the row of
    the table in docs/layouts.md, "Reading a divergence signature", cited once per message.
    """
    if s.ok:
        return ["the claimed reading reproduces the expected outputs at every step"]
    zero_h = not np.any(inputs.h0)
    zero_c = inputs.c0 is None or not np.any(inputs.c0)
    lengths = inputs.lengths
    T = case.seq_len
    valid = np.arange(T)[None, :] < lengths[:, None]
    lines = []
    bad = ~within(s.y_ratio)  # [K, T]
    dirs = [("forward" if d == 0 else "backward") for d in case.directions]
    if not bad.any():
        which = ", ".join(k for k in s.states)
        return [f"y matches at every step but the final states ({which}) do not: the states "
                "are read at the wrong step (padding read as data, the reverse direction's state "
                "taken at t=T-1) or from the wrong slot (layer/direction indexing, (h, c) order; "
                "P11, P13: docs/layouts.md, Reading a divergence signature)"]
    if case.num_directions == 2 and bad.any(axis=1).tolist().count(False) == 1:
        good = dirs[int(np.argmin(bad.any(axis=1)))]
        wrong = dirs[int(np.argmax(bad.any(axis=1)))]
        lines.append(f"the {good} direction is exact and the {wrong} one is wrong: the {wrong} "
                     "weights are read wrongly, or the directions are swapped / indexed wrongly "
                     "(P11: docs/layouts.md, Reading a divergence signature)")
    if case.seq_lengths is not None or inputs.seq_lengths is not None:
        pad_only = not (bad & valid.any(axis=0)[None, :]).any()
        if pad_only:
            return lines + ["exact at every valid step, wrong only at padded steps: the "
                            "variable-length handling differs (carry-forward vs zeros; P13)"]
    first = [int(np.argmax(b if d == 0 else b[::-1])) for b, d in zip(bad, case.directions,
                                                                          strict=True)]
    t0_exact = all(not (b[0] if d == 0 else b[::-1][0]) or not b.any()
                   for b, d in zip(bad, case.directions, strict=True))
    scale = float(np.abs(expected["y"]).max()) or 1.0
    err0 = max(float((a if d == 0 else a[::-1])[0]) for a, d in zip(s.y_abs, case.directions,
                                                                     strict=True))
    steps = ", ".join(f"{dirs[k]} from t={first[k]}" if d == 0 else
                      f"{dirs[k]} from its step {first[k]} (reading backwards)"
                      for k, d in enumerate(case.directions) if bad[k].any())
    lines.append(f"first wrong step: {steps}")
    if t0_exact:
        if zero_h and zero_c:
            lines.append(
                "exact at t=0, wrong from t=1 with a zero initial state: the input kernel and "
                "the biases are right; the recurrent kernel is wrong (transposed, reshaped or "
                "reordered R blocks: P1, P9), or a run-time forget-bias offset differs (f "
                "multiplies c_prev = 0 at t=0: P4), or (GRU) the reset placement differs with "
                "bR_n = 0 (P6b)")
        elif zero_c:
            lines.append(
                "exact at t=0 although h0 is nonzero (so R is right there), wrong later: a "
                "run-time forget-bias offset (f multiplies c0 = 0 at t=0: P4) or a difference "
                "that needs a nonzero cell state")
        else:
            lines.append("exact at t=0 with a nonzero initial state, wrong later: something "
                         "that only acts once the state has evolved (clipping, a saturating "
                         "activation, variable lengths)")
    else:
        rel = err0 / scale
        later = float(s.y_abs.max())
        if rel < 0.05 and later <= 3 * err0:
            lines.append(
                f"a small error from t=0 ({err0:.2g}, {rel:.1%} of the output scale): a "
                "semantic difference (activation definition, peephole wiring, clipping: P10, "
                "P12) or a small bias offset rather than a reordered layout")
        else:
            side = ("the input side is wrong: W's gate order or orientation (P2, P3, P7), the "
                    "biases (P5) or the cell variant (P6)")
            if not zero_h:
                side += "; with a nonzero h0 the recurrent kernel acts at t=0 too (P1b)"
            if not zero_c and case.cell == "lstm":
                side += "; with a nonzero c0 so does a forget-bias offset (P4b)"
            size = (f"by {err0:.2g} ({rel:.0%} of the output scale)" if later <= 3 * err0 else
                    f"by {err0:.2g} at first, growing to {later:.2g}")
            lines.append(f"wrong from t=0 {size}: {side}")
    return lines


def signature_table(s: Score, case: Case, limit: int = 12) -> str:
    """Per-step max abs error of y per direction (and the final states)."""
    T = case.seq_len
    steps = list(range(T)) if T <= limit else [*range(limit - 2), T - 2, T - 1]
    rows = []
    for k, d in enumerate(case.directions):
        rows.append([f"y {'forward' if d == 0 else 'backward'}"]
                    + [f"{s.y_abs[k, t]:.1e}" + ("*" if not within(s.y_ratio[k, t]) else "")
                       for t in steps])
    headers = ["t"] + [str(t) for t in steps]
    text = tabulate(rows, headers=headers, tablefmt="github")
    if s.states:
        text += "\n\nfinal states: " + ", ".join(f"{k} {v:.1e}" for k, v in s.states.items())
    return text


# The corrected mapping -------------------------------------------------------------------------

def _short(k: str, case: Case) -> str:
    layer, direction, name = k.split("/")
    single = case.num_layers == 1 and case.num_directions == 1
    return name if single else f"{name} ({layer.replace('layer', 'layer ')}, {direction})"


def corrected_mapping(doctor: Doctor, hyp: Hypothesis) -> list[dict[str, str]]:
    """Per slice of the claimed layout: what the claim reads there and what it actually holds
    (found by matching the slice against the corrected canonical blocks)."""
    case, layout = doctor.case, doctor.layout
    tr = doctor.trial(hyp)
    truth = tr.canonical
    shapes = {key(la, d, n): s for la, d in layer_dirs(case)
              for n, s in block_shapes(case, la).items()}
    rows = []
    for t in layout.tensors(case):
        arr = doctor.native[t.name]
        for pl in t.placements:
            S = arr[pl.index]
            if pl.fold_forget_bias:
                S = S - case.forget_bias
            claimed = _claim_text(pl, case)
            actual = _identify(S, pl, truth, shapes, case)
            if pl.transform == "copy":
                actual = actual.replace(" (as stored, not transposed)", "")
            rows.append({"tensor": t.name, "slice": pl.where, "claimed": claimed,
                         "actually": "same" if actual == claimed else actual})
    return rows


def _claim_text(pl, case: Case) -> str:
    names = " + ".join(_short(s, case) for s in pl.sources)
    how = {"copy": "", "transpose": " transposed",
           "reshape": " (C-order reshape)"}[pl.transform]
    return names + how


def _identify(S: np.ndarray, pl, truth: dict[str, np.ndarray], shapes, case: Case) -> str:
    first = pl.sources[0]
    kind = kind_of(first)
    layer, direction, _ = first.split("/")
    scale = max(float(np.abs(S).max()), 1.0)
    same_ld = [k for k in truth if k.startswith(f"{layer}/{direction}/")]
    others = [k for k in truth if k not in same_ld]
    if S.ndim == 2 or kind in ("W", "R", "Wp"):
        for k in same_ld + others:
            if kind_of(k) not in ("W", "R", "Wp") or int(np.prod(shapes[k])) != S.size:
                continue
            for how in READINGS:
                if np.allclose(read_slice(S, shapes[k], how), truth[k], rtol=0, atol=1e-12 * scale):
                    words = reading_name(S.shape, shapes[k], how, note=False)
                    words = {"as stored (not transposed)": " (as stored, not transposed)",
                             "transposed": " transposed"}.get(words, f" ({words})")
                    return _short(k, case) + words
        return "none of the blocks as such (see the mistakes above)"
    # 1-D: biases and peepholes; a summed placement matches a sum of the truth's blocks
    candidates: list[tuple[str, np.ndarray]] = []
    for k in same_ld + others:
        if truth[k].shape != S.shape or kind_of(k) in ("W", "R", "Wp"):
            continue
        kr = k.replace("/bW_", "/bR_")
        summed = (f"{_short(k, case)} + {_short(kr, case)}", truth[k] + truth[kr]) if (
            kind_of(k) == "bW" and kr in truth) else None
        if summed and len(pl.sources) > 1:  # a summed slot: name the sum first
            candidates.append(summed)
        candidates.append((_short(k, case), truth[k]))
        if summed and len(pl.sources) == 1:
            candidates.append(summed)
    for name, v in candidates:
        if np.allclose(S, v, rtol=0, atol=1e-12 * scale):
            return name
    for name, v in candidates:
        d = v - S
        if np.ptp(d) < 1e-12 * scale and abs(d[0]) > 1e-12:
            return f"{name} {'-' if d[0] > 0 else '+'} {abs(d[0]):g} (an offset)"
        for f in (2.0, 0.5):
            if np.allclose(S * f, v, rtol=0, atol=1e-12 * scale) and np.any(v):
                return f"{name} x {1 / f:g}"
    if not any(np.any(v) for k, v in truth.items() if kind_of(k) == kind):
        return "not used (the framework does not add it)"
    return "none of the blocks as such (see the mistakes above)"


# The whole diagnosis -------------------------------------------------------------------------

def fit_missing_bias(doctor: Doctor, budget_s: float = 20.0) -> Finding | None:
    """The bias half a file may lack (:func:`harness.mistakes.missing_bias_half`), fitted to
    the expected outputs by Levenberg-Marquardt on the float64 reference (forward-difference
    Jacobian): a Finding when the claimed weights plus the fitted half reproduce the outputs.

    Only tried where the outputs hold at least twice as many values as the half has (else any
    outputs could be fitted) and no state mixes time and batch (time-major / swapped states are
    data mistakes the catalogue tries)."""
    case = doctor.case
    keys = [key(la, d, f"bR_{g}") for la, d in layer_dirs(case) for g in case.gates]
    if case.cell == "gru" and case.reset_after:
        keys += [key(la, d, "bW_n") for la, d in layer_dirs(case)]
    H = case.hidden_size
    n = len(keys) * H
    names = [k for k in doctor.expected if k in ("y", "h_n", "c_n")]
    m = sum(doctor.expected[k].size for k in names)
    if m < 2 * n:
        return None
    start = time.perf_counter()

    def run(theta: np.ndarray) -> dict[str, np.ndarray]:
        c = dict(doctor.claimed)
        for i, k in enumerate(keys):
            c[k] = doctor.claimed[k] + theta[i * H:(i + 1) * H]
        doctor.evaluated += 1
        return doctor.outputs(Trial(doctor.native, c, case))

    def resid(theta: np.ndarray) -> np.ndarray:
        out = run(theta)
        return np.concatenate([(out[k] - doctor.expected[k]).ravel() for k in names])

    theta, r, lam = np.zeros(n), resid(np.zeros(n)), 1e-3
    for _ in range(60):
        if time.perf_counter() - start > budget_s:
            break
        eps = 1e-6
        J = np.empty((r.size, n))
        for j in range(n):
            t = theta.copy()
            t[j] += eps
            J[:, j] = (resid(t) - r) / eps
        A, g = J.T @ J, J.T @ r
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(A + lam * (np.diag(np.diag(A)) + 1e-12 * np.eye(n)), -g)
            r2 = resid(theta + step)
            if r2 @ r2 < r @ r:
                theta, r, lam, improved = theta + step, r2, lam / 3, True
                break
            lam *= 4
        if not improved or np.abs(step).max() < 1e-12 or np.abs(r).max() < 1e-12:
            break
    score = doctor.score(run(theta))
    if not score.ok:
        return None
    delta = {k: theta[i * H:(i + 1) * H] for i, k in enumerate(keys)}
    return Finding((missing_bias_half(case, delta),), score)


def diagnose(case: Case, layout: Layout, native: dict[str, np.ndarray], inputs: Inputs,
             expected: dict[str, np.ndarray], *, source: str = "expected outputs",
             tol: Tolerance | None = None, budget_s: float = 60.0) -> Diagnosis:
    """Explain the claim's signature, search the mistakes, build the fix (not written)."""
    start = time.perf_counter()
    doctor = Doctor(case, layout, native, inputs, expected, tol or tolerance_for(case, "expected"))
    claim = doctor.evaluate(())
    found, closest = doctor.search(budget_s=budget_s)
    if not found:  # no transformation of the file: a bias half it lacks, fitted to the outputs
        fitted = fit_missing_bias(doctor, budget_s=min(budget_s, 30.0))
        if fitted is not None:
            found, closest = [fitted], []
    closest = [f for f in closest if f.score.worst <= NEAR_MISS]
    dx = Diagnosis(case=case, layout=layout, source=source, claim=claim,
                   signature=explain(case, inputs, claim, expected), found=found,
                   closest=closest, noops=_unique(doctor.catalogue.noops), local=doctor.local)
    best = dx.best
    if best is not None and best.hypothesis and all(m.family != "data" for m in best.hypothesis):
        tr = doctor.trial(best.hypothesis)
        dx.fixed_case = tr.case
        dx.fixed = layout.to_native(Canonical(tr.canonical), tr.case)
        back = layout.from_native(dx.fixed, tr.case)
        check = reference.run(tr.case, back, inputs).named()
        dx.fixed_error = max(float(np.abs(check[k] - v).max()) for k, v in expected.items())
        dx.mapping = corrected_mapping(doctor, best.hypothesis)
    dx.evaluated = doctor.evaluated
    dx.stopped = doctor.stopped
    dx.seconds = time.perf_counter() - start
    return dx


def _unique(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen, out = set(), []
    for text, why in items:
        if why not in seen:
            seen.add(why)
            out.append((text, why))
    return out


def render(dx: Diagnosis) -> str:
    """The report printed by ``rnn-harness doctor``."""
    case = dx.case
    lines = [f"# Doctor: case `{case.name}`, claimed layout `{dx.layout.name}`", "",
             f"{case.cell.upper()} I={case.input_size} H={case.hidden_size}"
             + (f" P={case.proj_size}" if case.proj_size else "")
             + f", {case.num_layers} layer(s), {case.dir_mode}, B={case.batch}, T={case.seq_len};"
             f" expected outputs: {dx.source}", "",
             "## Signature of the claimed reading", "",
             "max abs error of y per step (* = beyond tolerance):", "",
             signature_table(dx.claim, case), ""]
    lines += [f"- {x}" for x in dx.signature]
    lines += ["", "## Diagnosis", ""]
    best = dx.best
    if best is None:
        lines.append("Nothing reproduces the outputs. "
                     "No transformation among the plausible mistakes reproduces the expected "
                     f"outputs ({dx.evaluated} hypotheses tried in {dx.seconds:.1f} s), nor "
                     "does a bias half missing from the file."
                     + (" The search stopped at its time budget before trying them all "
                        "(--budget; a smaller case with the same layout runs faster)."
                        if dx.stopped else ""))
        if dx.closest:
            lines += ["", f"Near misses (within {NEAR_MISS:g}x tolerance; worst error in "
                      "tolerances):"]
            for f in dx.closest:
                lines.append(f"- {' + '.join(m.text for m in f.hypothesis)}: "
                             f"{f.score.worst:.3g}x tolerance")
    elif not best.hypothesis:
        lines.append("The claimed layout already reproduces the expected outputs "
                     f"(worst {best.score.worst:.2g}x tolerance): nothing to fix.")
    else:
        n = len(best.hypothesis)
        lines.append(f"Found in {dx.seconds:.1f} s ({dx.evaluated} hypotheses tried): "
                     + ("this mistake reproduces" if n == 1 else
                        f"these {n} mistakes together reproduce")
                     + f" the expected outputs (worst {best.score.worst:.2g}x tolerance, "
                     f"max abs {_max_abs(best.score):.1e}):")
        lines.append("")
        lines += [f"{i}. {m.text}" for i, m in enumerate(best.hypothesis, 1)]
        at = places_of(best.hypothesis, case)
        if case.num_layers * case.num_directions > 1 and at != ["every layer and direction"]:
            lines += ["", "Where: " + "; ".join(at) + ". Every other layer and direction is "
                      "right as claimed."]
        if len(dx.found) > 1:
            lines += ["", "Other transformations that fit equally well (these weights cannot "
                      "tell them apart):"]
            lines += [f"- {' + '.join(m.text for m in f.hypothesis)}" for f in dx.found[1:4]]
        if dx.mapping:
            lines += ["", f"### Corrected mapping (layout `{dx.layout.name}`)", ""]
            lines += mapping_lines(dx.mapping)
        if dx.fixed_case is not None and dx.fixed_case != case:
            diff = {k: v for k, v in dx.fixed_case.model_dump().items()
                    if case.model_dump().get(k) != v}
            lines += ["", "The case itself differs: set " + ", ".join(
                f"`{k}: {str(v).lower() if isinstance(v, bool) else v}`" for k, v in diff.items())
                + " in the case (the corrected weights are for that case)."]
        if any(m.family == "data" for m in best.hypothesis):
            lines += ["", "This is a mistake in how the inputs were fed, not in the weights: no "
                      "corrected weights file can absorb it."]
    if dx.local is not None:
        lines += ["", "### Layer by layer", ""] + local_lines(dx)
    if dx.noops:
        lines += ["", "Mistakes these sizes cannot reveal (a case with other sizes would):"]
        lines += [f"- {text}: {why}" for text, why in dx.noops]
    return "\n".join(lines) + "\n"


def mapping_lines(mapping: list[dict[str, str]]) -> list[str]:
    """The corrected mapping's slices that are not as claimed, and a count of the rest (a
    2-layer bidirectional LSTM has 48 slices, most of them right; ``--format json`` keeps
    every one)."""
    changed = [r for r in mapping if r["actually"] != "same"]
    rest = len(mapping) - len(changed)
    lines = []
    if changed:
        lines += [tabulate([list(r.values()) for r in changed],
                           headers=["tensor", "slice", "claimed", "actually"], tablefmt="github"),
                  ""]
    if not rest:
        lines.append(f"Every slice ({len(mapping)}) is misread.")
    elif not changed:
        lines.append(f"Every slice ({len(mapping)}) holds what the layout claims: the mistake "
                     "is not in where the weights are.")
    else:
        lines.append(f"The {rest} other slice{'s' if rest > 1 else ''} (of {len(mapping)}) "
                     f"{'hold' if rest > 1 else 'holds'} what the layout claims "
                     "(`--format json` lists every slice).")
    return lines


def places_of(hyp: Hypothesis, case: Case) -> list[str]:
    """Where the mistakes of ``hyp`` are: ``layer 1, backward``, ``layer 0 (directions
    swapped)``; ``every layer and direction`` for a mistake made everywhere."""
    out: list[str] = []
    for m in hyp:
        base, _, at = m.id.partition("@")
        if not at:
            text = "every layer and direction"
        elif base == "swap:directions":
            text = f"layer {at} (directions swapped)"
        else:
            text = where(int(at[:-1]), "fb".index(at[-1]), case)
        if text not in out:
            out.append(text)
    return out


def local_lines(dx: Diagnosis) -> list[str]:
    """What the search of mistakes confined to one layer and direction did, in words."""
    local, case = dx.local, dx.case
    lines = []
    if local.mode == "per-layer":
        states = "h_n, c_n" if case.cell == "lstm" and "c_n" in _names(dx) else "h_n"
        lines.append(
            f"Each layer's final states ({states}) are in the expected outputs and depend only "
            "on that layer and those below it, so each layer and direction was judged alone "
            "(the last layer on y too), layer 0 first, each layer on what the fixed layers "
            f"below give it: {_n(local.tried)}.")
    else:
        lines.append(
            "The expected outputs hold only y, not the final states (h_n"
            + (", c_n" if case.cell == "lstm" else "") + "): y shows the last layer only, so a "
            "layer below it cannot be judged alone and the per-layer search is not possible. "
            f"Searched instead: {local.note}, each judged on y of the whole stack "
            f"({_n(local.joint)}; two mistakes in the lower layers at once were not searched)"
            + (f", then the last layer alone on y, its lower layers as claimed "
               f"({_n(local.tried)})" if local.places else "")
            + ". Save h_n" + (" and c_n" if case.cell == "lstm" else "")
            + " with y to search every layer alone.")
    if local.everywhere:
        lines.append(f"The mistake found at {local.everywhere} is made the same way in every "
                     "layer and direction.")
    if local.whole_ok is False:
        lines.append("The fixes found layer by layer match each layer's final states but not "
                     "every expected output together (a final state can hide a wrong step): "
                     "the search went on over the whole stack.")
    lines.append("")
    swapped = {p.layer for p in local.places if p.swapped and p.status in ("exact", "fixed")}
    for la in sorted(swapped):
        lines.append(f"- layer {la}: its forward and backward weights are swapped")
    for p in local.places:
        at = where(p.layer, p.direction, case)
        read = " (read from the other direction's weights)" if p.swapped else ""
        n = f" ({_n(p.tried)})" if p.tried else ""
        if p.status == "exact":
            lines.append(f"- {at}: right as claimed{n}")
        elif p.status == "fixed" and not p.mistakes:
            lines.append(f"- {at}: right once the directions are swapped{n}")
        elif p.status == "fixed":
            what = "; ".join(m.text.split(": ", 1)[1] for m in p.mistakes)
            lines.append(f"- {at}{read}: {what}{n}")
        elif p.status == "no fix":
            lines.append(f"- {at}{read}: no mistake confined to it reproduces its outputs, "
                         f"alone or two together (pairs grown from the {LOCAL_BEAM_WIDTH} "
                         f"nearest singles){n}")
        elif p.status == "stopped":
            lines.append(f"- {at}{read}: the search stopped at its time budget (--budget)"
                         f"{n or ' before it'}")
        else:
            why = "the time budget ran out" if local.stopped else "a layer below it has no fix"
            lines.append(f"- {at}: not searched ({why})")
    if local.stopped:
        lines += ["", "The search stopped at its time budget (--budget) before it was complete."]
    return lines


def _n(count: int) -> str:
    return f"{count} hypothes{'i' if count == 1 else 'e'}s"


def _names(dx: Diagnosis) -> set[str]:
    return set(dx.claim.states)


def _max_abs(s: Score) -> float:
    return max([float(s.y_abs.max())] + list(s.states.values()))


def diagnosis_dict(dx: Diagnosis) -> dict:
    """The diagnosis as plain data (``doctor --format json``): what ``render`` prints."""

    def finding(f: Finding) -> dict:
        return {"mistakes": [m.text for m in f.hypothesis], "worst_tol_ratio": f.score.worst}

    return {
        "case": dx.case.name, "claimed_layout": dx.layout.name, "expected_from": dx.source,
        "claim": {"ok": dx.claim.ok, "worst_tol_ratio": dx.claim.worst,
                  "y_max_abs_per_step": dx.claim.y_abs.tolist(), "states_max_abs": dx.claim.states},
        "signature": dx.signature,
        "pitfall_codes": "docs/layouts.md, Reading a divergence signature",
        "found": [finding(f) for f in dx.found], "closest": [finding(f) for f in dx.closest],
        "hypotheses_tried": dx.evaluated, "seconds": dx.seconds, "stopped_at_budget": dx.stopped,
        "corrected_mapping": dx.mapping, "fixed_max_abs": dx.fixed_error,
        "where": places_of(dx.best.hypothesis, dx.case) if dx.best else [],
        "local_search": None if dx.local is None else {
            "mode": dx.local.mode, "hypotheses_tried": dx.local.tried,
            "joint_hypotheses_tried": dx.local.joint, "stopped_at_budget": dx.local.stopped,
            "places": [{"layer": p.layer, "direction": DIRECTION_NAMES[p.direction],
                        "status": p.status, "mistakes": [m.text for m in p.mistakes],
                        "swapped": p.swapped, "hypotheses_tried": p.tried}
                       for p in dx.local.places]},
    }


def doctor_file(case_file: str, weights: str, layout_name: str, *, expected: str | None = None,
                adapter: str | None = None, write_fixed: str | None = None,
                name: str | None = None, select: str | None = None,
                budget_s: float = 60.0, fmt: str = "markdown") -> tuple[str, int]:
    """``rnn-harness doctor``: the report (markdown, or JSON with ``fmt="json"``) and the exit
    code (0 found, 1 not found)."""
    from harness.adapters import get_adapter
    from harness.cases import load_cases
    from harness.convert import guard, pick_case
    from harness.layouts import get_layout
    from harness.npz import save_npz
    from harness.prepare import load_inputs, max_memory
    from harness.readers import read_native as read_any

    limit = max_memory()

    def read_native(path, layout_name, c, select=None):  # never more than the memory limit
        return read_any(path, layout_name, c, select=select, max_bytes=limit)

    if (expected is None) == (adapter is None):
        raise HarnessError("give either --expected OUT.npz or --adapter NAME")
    layout = get_layout(layout_name)
    runner = get_adapter(adapter) if adapter else None
    cases = load_cases(case_file)
    guard(cases, name)

    def claimed_native(c: Case) -> dict[str, np.ndarray]:
        native, _ = read_native(weights, layout.name, c, select=select)
        layout.from_native(native, c, file=weights)
        return native

    case = pick_case(cases, name, claimed_native, case_file)
    try:
        native = claimed_native(case)
    except WeightsError as exc:
        from harness.convert import fitting_layouts
        have, _ = read_native(weights, layout.name, case, select=select)
        fits_ = [n for n in fitting_layouts(have, case) if n != layout.name]
        if fits_:
            exc.message += (f" (the file fits layout {', '.join(fits_)}; the claimed layout must "
                            "be able to read the file's tensors)")
        raise
    inputs = load_inputs(case, limit)
    if runner is not None:
        for why in (runner.unavailable_reason(), runner.not_applicable_reason(case)):
            if why:
                raise HarnessError(f"adapter {runner.name!r} cannot run this case here: {why}")
        own = runner.layout or get_layout("canonical")
        try:
            theirs, _ = read_native(weights, own.name, case, select=select)
            truth = own.from_native(theirs, case, file=weights)
        except WeightsError as exc:
            exc.message += (f" (with --adapter, the weights must be in the adapter's own layout "
                            f"{own.name!r}: the framework is the source of truth)")
            raise
        out, _ = runner.run(case, truth, inputs)
        want = out.named()
        tol = tolerance_for(case, runner.name, runner.tolerances)
        source = f"adapter {runner.name} (the file read as its layout {own.name!r})"
    else:
        want = load_expected(expected, case)
        tol = tolerance_for(case, "expected")
        source = f"{expected}"
    dx = diagnose(case, layout, native, inputs, want, source=source, tol=tol, budget_s=budget_s)
    text = render(dx)
    if fmt == "json":
        import json

        data = diagnosis_dict(dx)
        if write_fixed and dx.fixed is not None:
            save_npz(write_fixed, dx.fixed)
            data["wrote_fixed"] = write_fixed
        return json.dumps(data, indent=2, default=str) + "\n", 0 if dx.best is not None else 1
    if write_fixed:
        if dx.fixed is not None:
            save_npz(write_fixed, dx.fixed)
            text += (f"\nWrote the corrected weights (layout `{layout.name}`) to {write_fixed}: "
                     f"read as `{layout.name}` they reproduce the expected outputs (max abs "
                     f"error {dx.fixed_error:.1e}).\n")
        else:
            text += f"\nNo corrected weights written to {write_fixed}: nothing to correct.\n"
    return text, 0 if dx.best is not None else 1
