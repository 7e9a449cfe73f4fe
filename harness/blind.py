"""Blind spots of a case: layout mistakes its weights, inputs and tolerances could not reveal.

A conformance case only proves a layout right if every plausible mistake
(:mod:`harness.mistakes`) would push the divergence past ``k`` times the tolerance. This module
runs each single mistake through the float64 reference on the case's own weights and inputs
and lists the ones that stay below that, with why:

- the mistake is a no-op at the case's sizes (a transpose of a [1, 1] block, a reshape of an
  [H, 1] slice): "the same either way";
- it changes the weights but not the outputs enough (constant weights, zero biases, two
  gates with equal blocks, a tolerance so loose nothing could exceed it): "changes the
  outputs by only 3.2x tolerance".

"Tolerance" is each adapter's effective tolerance (:func:`harness.compare.tolerance_for`: a
per-adapter ``atol: 1e300`` is judged as such), one check per distinct tolerance among the
adapters compared (:func:`check`). A case blind to some mistakes gets a warning in every
report format; a case blind to every one is a case error ("vacuous: no plausible mistake could
fail here"), unless it says ``allow_vacuous: true``.

Swapped initial states are no blind spot of a case whose states are zero: they cannot matter
there, so it is no warning, only a note that the case does not exercise initial states
(:attr:`BlindCheck.notes`).

The cost is bounded without skipping anything: the probes run on a truncated copy of the case
(:func:`truncated`): at most :data:`MAX_STEPS` timesteps and :data:`MAX_BATCH` sequences, and
as many of the bottom layers as fit :data:`BUDGET` (at least one). A layout mistake is a
permutation or reshape of the weights, which shows, or not, in the first steps of the first
sequences just as in all of them; and every layer's final states (h_n, c_n) are compared and
depend only on that layer and those below it, so a mistake the bottom layers show is one the
whole case shows. What was probed is said in the note.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness import reference
from harness.compare import COMPARED, Tolerance, tolerance_for
from harness.data import Inputs
from harness.layouts import get_layout
from harness.mistakes.case_families import ZERO_STATES
from harness.params import Canonical, block_shapes, layer_dirs
from harness.spec import Case

K = 10.0
MAX_STEPS = 16
MAX_BATCH = 2
BUDGET = 4e7
"""mistakes x weight elements probed: each mistake is one reference run, whose cost is the
weights' size (the copy runs a few steps of one or two sequences). trained-like (two layers of
128 units, 105 mistakes) fits whole; seed000's five layers of 320 units get their bottom
layer."""
VACUOUS = "vacuous: no plausible mistake could fail here"


@dataclass(frozen=True)
class BlindSpot:
    mistake: str  # mistake id, e.g. "reading:R:C"; "" for a no-op at these sizes
    text: str
    why: str


@dataclass(frozen=True)
class Judged:
    """The check under one tolerance, shared by ``adapters``."""

    adapters: tuple[str, ...]
    tol: Tolerance
    spots: list[BlindSpot]
    probed: int  # mistakes run (no-ops not counted)

    @property
    def blind(self) -> list[BlindSpot]:
        return [s for s in self.spots if s.mistake]

    @property
    def warned(self) -> list[BlindSpot]:
        """The spots a warning names: all but the zero initial states (a note)."""
        return [s for s in self.spots if not _zero_states(s)]

    @property
    def vacuous(self) -> bool:
        """Not one plausible mistake would fail the case."""
        return len(self.blind) == self.probed


@dataclass(frozen=True)
class BlindCheck:
    """The blind-spot check of one case, as data; reports render it, :func:`check` makes it."""

    case: str
    judged: list[Judged] = field(default_factory=list)
    probed_on: str = ""  # the truncated copy, e.g. "layer 0 of 5, 12 steps, 2 sequences"
    allow_vacuous: bool = False  # the case says it means to be blind to everything
    not_run: str = ""  # why the check could not run
    # the warning as a report of run.json schema < 2 recorded it (text only, nothing to judge)
    recorded_warning: str = ""

    @property
    def vacuous(self) -> list[Judged]:
        return [j for j in self.judged if j.vacuous]

    @property
    def error(self) -> str:
        """The case error of a vacuous case (empty when it is not one, or says it may be)."""
        if not self.vacuous or self.allow_vacuous:
            return ""
        who = "; ".join(_tol_text(j) for j in self.vacuous)
        return (f"{VACUOUS} ({who}); fix the weights, inputs or tolerance, or set "
                f"allow_vacuous: true")

    @property
    def warning(self) -> str:
        """One line for every report format: what the case is blind to (empty: nothing)."""
        if self.recorded_warning:
            return self.recorded_warning
        if self.not_run:
            return f"Blind-spot check not run ({self.not_run})."
        parts = []
        for j in self.judged:
            spots = j.warned if len(self.judged) == 1 else j.blind
            if spots:
                who = f" [{_tol_text(j)}]" if len(self.judged) > 1 else ""
                parts.append("; ".join(_group(spots)) + who)
        if not parts:
            return ""
        head = (f"Blind to (mistakes that move the outputs by less than {K:g}x tolerance"
                + (", intended: allow_vacuous" if self.vacuous and self.allow_vacuous else "")
                + "): ")
        return head + " | ".join(parts) + "."

    @property
    def notes(self) -> list[str]:
        """What the case does not exercise, said once (not a warning: no mistake there can
        change its outputs): zero initial states."""
        if any(_zero_states(s) for j in self.judged for s in j.spots):
            return [ZERO_STATES_NOTE]
        return []

    @property
    def note(self) -> str:
        """summary.md's line: the warning, or that the case sees every mistake."""
        probed = f" Probed on {self.probed_on}." if self.probed_on else ""
        return (self.warning or f"Blind to: nothing (every plausible layout mistake moves the "
                                f"outputs by more than {K:g}x tolerance).") + probed

    def record(self) -> dict:
        """The check as plain data, for run.json (:func:`from_record` reads it back)."""
        return {"probed_on": self.probed_on, "allow_vacuous": self.allow_vacuous,
                "not_run": self.not_run,
                "judged": [{"adapters": list(j.adapters), "atol": j.tol.atol, "rtol": j.tol.rtol,
                            "floor_factor": j.tol.floor_factor, "probed": j.probed,
                            "spots": [[s.mistake, s.text, s.why] for s in j.spots]}
                           for j in self.judged]}


def from_record(case: str, doc: dict) -> BlindCheck:
    """A check recorded in run.json (:meth:`BlindCheck.record`)."""
    judged = [Judged(tuple(j["adapters"]), Tolerance(j["atol"], j["rtol"], j["floor_factor"]),
                     [BlindSpot(*spot) for spot in j["spots"]], j["probed"])
              for j in doc.get("judged", [])]
    return BlindCheck(case, judged, doc.get("probed_on", ""), doc.get("allow_vacuous", False),
                      doc.get("not_run", ""))


def combined(checks: list[BlindCheck], adapters: list[str]) -> BlindCheck:
    """One case's checks made by several shards of a run, as the whole run makes it: each
    tolerance judged once, for the adapters of every shard that judged it (in ``adapters``'
    order). The shards probed the same copy of the case, so a tolerance's spots are the same
    in each."""
    whole = [c for c in checks if not c.recorded_warning]
    if not whole:
        return checks[0]
    made = [c for c in whole if not c.not_run] or whole[:1]
    groups: dict[Tolerance, Judged] = {}
    for check in made:
        for j in check.judged:
            have = groups.get(j.tol)
            names = set(j.adapters) | (set(have.adapters) if have else set())
            order = sorted(names, key=lambda n: adapters.index(n) if n in adapters else 1 << 30)
            groups[j.tol] = Judged(tuple(order), j.tol, j.spots, j.probed)
    first = made[0]
    judged = sorted(groups.values(), key=lambda j: min(
        (adapters.index(n) for n in j.adapters if n in adapters), default=1 << 30))
    return BlindCheck(first.case, judged, first.probed_on, first.allow_vacuous, first.not_run)


ZERO_STATES_NOTE = ("the case does not exercise initial states: h0 and c0 are zero, so "
                    "passing them wrongly (swapped, say) cannot show here; "
                    "`initial_state: random` does")


def _zero_states(spot: BlindSpot) -> bool:
    return not spot.mistake and (spot.text, spot.why) == (
        ZERO_STATES[0], f"the same at these sizes: {ZERO_STATES[1]}")


def _tol_text(j: Judged) -> str:
    who = ", ".join(j.adapters) or "default tolerance"
    return f"{who}: atol {j.tol.atol:g}, rtol {j.tol.rtol:g}"


def _weights(case: Case, layers: int) -> int:
    return sum(int(np.prod(shape)) for layer, _ in layer_dirs(case) if layer < layers
               for shape in block_shapes(case, layer).values())


def probe_layers(case: Case, mistakes: int) -> int:
    """How many bottom layers the probes run on: as many as :data:`BUDGET` allows, at least
    one."""
    n = case.num_layers
    while n > 1 and mistakes * _weights(case, n) > BUDGET:
        n -= 1
    return n


def truncated(case: Case, inputs: Inputs, layers: int | None = None) -> tuple[Case, Inputs]:
    """The case and its inputs cut to the first :data:`MAX_STEPS` timesteps,
    :data:`MAX_BATCH` sequences and ``layers`` bottom layers (forward only: the blind-spot
    check compares outputs)."""
    T, B = min(case.seq_len, MAX_STEPS), min(case.batch, MAX_BATCH)
    L = case.num_layers if layers is None else layers
    S = L * case.num_directions  # initial states of the kept layers
    lengths = None
    if inputs.seq_lengths is not None:
        lengths = np.minimum(np.asarray(inputs.seq_lengths)[:B], T)
    small = case.model_copy(update={
        "seq_len": T, "batch": B, "gradients": False, "num_layers": L,
        "seq_lengths": [int(n) for n in lengths] if lengths is not None else None})
    return small, Inputs(x=inputs.x[:B, :T], h0=inputs.h0[:S, :B],
                         c0=inputs.c0[:S, :B] if inputs.c0 is not None else None,
                         seq_lengths=lengths)


def blind_spots(case: Case, canonical: Canonical | None = None, inputs: Inputs | None = None,
                k: float = K, tol: Tolerance | None = None) -> list[BlindSpot]:
    """The single mistakes ``case`` cannot tell from the truth by at least ``k`` x ``tol``
    (default: the case's tolerance for an adapter without defaults of its own), probed on
    :func:`truncated` copies of the case and its inputs."""
    return _judge(case, canonical, inputs, k, [tol or tolerance_for(case, "")])[0][0][0]


def _judge(case: Case, canonical: Canonical | None, inputs: Inputs | None, k: float,
           tols: list[Tolerance]) -> tuple[list[tuple[list[BlindSpot], int]], str]:
    """(spots, mistakes probed) per tolerance, and what the copy probed was."""
    from harness.mistakes import Scorer, catalogue
    from harness.prepare import load_inputs, load_weights

    canonical = canonical if canonical is not None else load_weights(case)
    inputs = inputs if inputs is not None else load_inputs(case)
    layout = get_layout("canonical")
    layers = probe_layers(case, len(catalogue(case, layout).mistakes))
    full = case
    case, inputs = truncated(case, inputs, layers)
    kept = {k2: v for k2, v in canonical.tensors.items()
            if int(k2.split("/")[0].removeprefix("layer")) < layers}
    probed_on = (f"{'layer 0' if layers == 1 else f'layers 0-{layers - 1}'} of "
                 f"{full.num_layers}, " if layers < full.num_layers else "")
    probed_on += f"{case.seq_len} of {full.seq_len} steps, {case.batch} of {full.batch} sequences"
    truth = reference.run(case, Canonical(kept), inputs).named()
    out = []
    for tol in tols:
        scorer = Scorer(case, layout, kept, inputs, truth, tol)
        spots = [BlindSpot("", text, f"the same at these sizes: {why}")
                 for text, why in scorer.catalogue.noops]
        for m in scorer.catalogue.mistakes:
            s = scorer.evaluate((m,))
            if s.worst < k:
                spots.append(BlindSpot(m.id, m.brief,
                                       f"changes the outputs by only {s.worst:.2g}x tolerance"))
        out.append((spots, len(scorer.catalogue.mistakes)))
    return out, probed_on


def check(case: Case, adapters: list | None = None, k: float = K) -> BlindCheck:
    """The blind-spot check of ``case`` judged with each of ``adapters``' effective tolerance
    (:func:`harness.compare.tolerance_for`; adapters sharing one are judged once; none: the
    case's tolerance for an adapter without defaults of its own)."""
    groups: dict[Tolerance, list[str]] = {}
    for a in adapters or []:
        groups.setdefault(tolerance_for(case, a.name, a.tolerances), []).append(a.name)
    if not groups:
        groups[tolerance_for(case, "")] = []
    allow = bool(getattr(case, "allow_vacuous", False))
    try:
        found, probed_on = _judge(case, None, None, k, list(groups))
    except Exception as exc:  # a case that cannot be prepared is reported elsewhere
        return BlindCheck(case.name, allow_vacuous=allow,
                          not_run=f"{type(exc).__name__}: {str(exc)[:120]}")
    judged = [Judged(tuple(names), tol, spots, n)
              for (tol, names), (spots, n) in zip(groups.items(), found, strict=True)]
    return BlindCheck(case.name, judged, probed_on, allow)


def of_result(result, case: Case) -> BlindCheck | None:
    """The check recorded for ``case`` in ``result`` (``RunResult.blind``, made by the run or
    carried over from the shards of a merged report); None for a case that compared nothing,
    could not be prepared, or comes from a report that recorded no checks. Never made here:
    reports only render."""
    return result.blind.get(case.name)


def check_compared(result, case: Case) -> BlindCheck | None:
    """The check of ``case`` judged with the tolerance of each adapter its pairs compared
    (None where none did, or the case could not be prepared): what a run records."""
    if case.name in result.case_errors:
        return None
    by_name = {a.name: a for a in result.adapters}
    compared = [by_name[p.adapter] for p in result.pairs if p.case == case.name
                and p.status in COMPARED and p.adapter in by_name]
    return check(case, compared) if compared else None


def blind_note(case: Case, k: float = K) -> str:
    """One line for summary.md: what the case is blind to under its default tolerance."""
    return check(case, k=k).note


def _group(spots: list[BlindSpot]) -> list[str]:
    """Short phrases: gate orders counted per kind, the rest one phrase each."""
    out: list[str] = []
    orders: dict[str, int] = {}
    for s in spots:
        if s.mistake.startswith("order:"):
            kind = s.mistake.split(":")[1]
            orders[kind] = orders.get(kind, 0) + 1
        else:
            out.append(f"{s.text} ({s.why})")
    labels = {"all": "gate orders of every tensor", "W": "W gate orders", "R": "R gate orders",
              "b": "bias gate orders", "p": "peephole orders"}
    for kind, n in orders.items():
        out.append(f"{n} {labels[kind]}")
    return out
