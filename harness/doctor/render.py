"""The diagnosis as the Markdown report ``rnn-harness doctor`` prints, and as plain data for
``--format json``."""

from __future__ import annotations

from tabulate import tabulate

from harness.doctor.explain import signature_table
from harness.doctor.findings import NEAR_MISS, Diagnosis, Finding
from harness.mistakes.local import where
from harness.mistakes.scoring import Hypothesis, Score
from harness.params import DIRECTION_NAMES
from harness.spec import Case


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
        states = "h_n, c_n" if case.cell_kind.has_cell_state and "c_n" in _names(dx) else "h_n"
        lines.append(
            f"Each layer's final states ({states}) are in the expected outputs and depend only "
            "on that layer and those below it, so each layer and direction was judged alone "
            "(the last layer on y too), layer 0 first, each layer on what the fixed layers "
            f"below give it: {_n(local.tried)}.")
    else:
        lines.append(
            "The expected outputs hold only y, not the final states (h_n"
            + (", c_n" if case.cell_kind.has_cell_state else "")
            + "): y shows the last layer only, so a "
            "layer below it cannot be judged alone and the per-layer search is not possible. "
            f"Searched instead: {local.note}, each judged on y of the whole stack "
            f"({_n(local.joint)}; two mistakes in the lower layers at once were not searched)"
            + (f", then the last layer alone on y, its lower layers as claimed "
               f"({_n(local.tried)})" if local.places else "")
            + ". Save h_n" + (" and c_n" if case.cell_kind.has_cell_state else "")
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
                         "alone or two together (every pair), nor with a bias half it holds as "
                         f"zeros fitted to them{n}")
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
