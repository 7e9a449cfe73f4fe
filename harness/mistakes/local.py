"""Mistakes confined to one layer and direction: in a real file a mistake is often in one
tensor of one layer. :func:`local_catalogue` confines the weight mistakes of a catalogue
(every family but ``variant`` and ``data``) to each layer and direction (:func:`scoped`), and
adds the swap of one layer's two directions (:func:`swap_layer_directions`); the doctor
searches them layer by layer."""

from __future__ import annotations

from harness.layouts.base import Layout
from harness.mistakes.misreadings import Catalogue
from harness.mistakes.mistake import STAGE_MOVE, STAGE_RESHAPE, Mistake, Trial
from harness.params import DIRECTION_NAMES, key, layer_dirs
from harness.spec import Case

# the families a mistake confined to one layer and direction can come from: the case (variant)
# and the data are not per layer
LOCAL_FAMILIES = ("reshape", "reading", "order", "bias", "forget", "swap")


def where(layer: int, direction: int, case: Case) -> str:
    """``layer 1, backward`` (``layer 1`` where the case has one direction)."""
    if case.num_directions == 1:
        return f"layer {layer}"
    return f"layer {layer}, {DIRECTION_NAMES[direction]}"


def scoped(m: Mistake, layer: int, direction: int, case: Case,
           owner: dict[str, set[tuple[int, int]]]) -> Mistake:
    """``m`` confined to one layer and direction: the canonical blocks of the others keep the
    claimed reading. A ``reshape`` acts on whole native tensors, so it keeps only its change to
    the tensors that hold nothing but that layer and direction (``owner``: tensor -> the (layer,
    direction) pairs it holds)."""
    prefix = key(layer, direction, "")
    mine = {(layer, direction)}

    def apply(trial: Trial) -> None:
        if m.stage == STAGE_RESHAPE:
            before = trial.native
            m.apply(trial)
            trial.native = {n: (v if owner.get(n) == mine else before[n])
                            for n, v in trial.native.items()}
            return
        before = trial.canonical
        m.apply(trial)
        after = trial.canonical
        trial.canonical = {k: (after[k] if k.startswith(prefix) else v)
                           for k, v in before.items()}

    at = where(layer, direction, case)
    return Mistake(f"{m.id}@{layer}{DIRECTION_NAMES[direction][0]}", m.family, f"{at}: {m.text}",
                   f"{m.slot}@{layer}/{direction}", m.stage, apply, m.fixable,
                   f"{at}: {m.brief}")


def swap_layer_directions(layer: int, case: Case) -> Mistake:
    """The forward and backward weights of one layer swapped (the others right)."""
    def apply(trial: Trial) -> None:
        c = dict(trial.canonical)
        for d in (0, 1):
            prefix, other = key(layer, d, ""), key(layer, 1 - d, "")
            for k in trial.canonical:
                if k.startswith(prefix):
                    c[k] = trial.canonical[other + k[len(prefix):]]
        trial.canonical = c

    text = f"layer {layer}: forward and backward weights are swapped"
    return Mistake(f"swap:directions@{layer}", "swap", text, f"swap:directions@{layer}",
                   STAGE_MOVE, apply)


def owners(case: Case, layout: Layout) -> dict[str, set[tuple[int, int]]]:
    """Native tensor -> the (layer, direction) pairs whose blocks it holds."""
    out: dict[str, set[tuple[int, int]]] = {}
    for t in layout.tensors(case):
        for pl in t.placements:
            for src in pl.sources:
                layer, direction, _ = src.split("/")
                out.setdefault(t.name, set()).add(
                    (int(layer[len("layer"):]), DIRECTION_NAMES.index(direction)))
    return out


def local_catalogue(case: Case, layout: Layout, cat: Catalogue
                    ) -> dict[tuple[int, int], list[Mistake]]:
    """(layer, direction) -> the catalogue's weight mistakes confined to it. A reshape is kept
    only where a native tensor holds that layer and direction alone (else it cannot be
    confined); the swap of the directions is per layer (:func:`swap_layer_directions`)."""
    owner = owners(case, layout)
    out: dict[tuple[int, int], list[Mistake]] = {}
    for layer, d in layer_dirs(case):
        ms = []
        for m in cat.mistakes:
            if m.family not in LOCAL_FAMILIES or m.id == "swap:directions":
                continue
            if m.stage == STAGE_RESHAPE and not any(v == {(layer, d)} for v in owner.values()):
                continue
            ms.append(scoped(m, layer, d, case, owner))
        out[(layer, d)] = ms
    return out

