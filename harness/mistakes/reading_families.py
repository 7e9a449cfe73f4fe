"""The mistake families of how a file's tensors were read into gate blocks: ``reshape`` (a
whole native tensor reshaped where a transpose belonged, or the reverse), ``reading`` (every
block of one kind read from its slice another way) and ``order`` (the gate blocks in another
order). Each is built from index maps on the claimed layout's own description, so a mistake
that is a no-op at the case's sizes is told as such (``noops``)."""

from __future__ import annotations

import itertools

import numpy as np

from harness.layouts.base import Placement
from harness.mistakes.mistake import (
    STAGE_ORDER,
    STAGE_READING,
    STAGE_RESHAPE,
    Mistake,
    Trial,
    base_name,
    flat_index,
    gate_of,
    kind_of,
)
from harness.mistakes.slice_readings import READINGS, read_slice, reading_name, representative
from harness.params import DIRECTION_NAMES, key, layer_dirs
from harness.spec import Case

KIND_LABEL = {"W": "input-weight (W)", "R": "recurrent-weight (R)", "Wp": "projection (Wp)"}


def reshapes(case: Case, tensors, noops) -> list[Mistake]:
    """Whole native tensors filled by ``reshape`` where a transpose belonged, or the reverse."""
    groups: dict[str, list] = {}
    for t in tensors:
        if len(t.shape) >= 2 and len(t.placements) > 1 and t.shape[-1] > 1 and t.shape[-2] > 1:
            groups.setdefault(base_name(t.name), []).append(t)
    out = []
    variants = {
        "reshape-C": ("a C-order reshape of the [{b}, {a}] matrix where its transpose belongs "
                      "(x.reshape({a}, {b}) instead of x.T)"),
        "reshape-F": ("an F-order reshape of the [{b}, {a}] matrix where its transpose belongs"),
        "transpose-C": ("the transpose of a [{b}, {a}] matrix where its C-order reshape belongs "
                        "(x.T instead of x.reshape({a}, {b}))"),
        "transpose-F": "the transpose of a [{b}, {a}] matrix where its F-order reshape belongs",
    }
    for base, ts in groups.items():
        seen: set[bytes] = set()
        for vid, words in variants.items():
            maps = {t.name: _whole_map(t.shape, vid) for t in ts}
            sig = b"".join(m.tobytes() for m in maps.values())
            a, b = ts[0].shape[-2:]
            text = f"`{base}` holds " + words.format(a=a, b=b)
            if all(np.array_equal(m, flat_index(shape_t)) for m, shape_t
                   in zip(maps.values(), (t.shape for t in ts), strict=True)):
                noops.append((text, f"`{base}` is {a}x{b}"))
                continue
            if sig in seen:
                continue
            seen.add(sig)

            def apply(trial: Trial, maps=maps) -> None:
                trial.native = {**trial.native, **{
                    n: trial.native[n].ravel()[m] for n, m in maps.items()}}

            out.append(Mistake(f"reshape:{base}:{vid}", "reshape", text, f"reshape:{base}",
                               STAGE_RESHAPE, apply))
    return out


def _whole_map(shape: tuple[int, ...], vid: str) -> np.ndarray:
    """Index map (into the flattened tensor) of the fix for one whole-tensor variant."""
    idx = flat_index(shape)
    lead, (a, b) = shape[:-2], shape[-2:]
    order = vid[-1]
    flat = idx.reshape(-1, a, b)
    out = []
    for N in flat:
        if vid.startswith("reshape"):  # N = X.reshape(a, b) with X [b, a]; fix = X.T
            out.append(N.reshape((b, a), order=order).T)
        else:  # N = X.T with X [b, a]; fix = X.reshape(a, b)
            out.append(N.T.reshape((a, b), order=order))
    return np.stack(out).reshape(lead + (a, b))


def readings(case: Case, home, shape_of, shapes, noops) -> list[Mistake]:
    """Gate blocks of one kind read from their slices in another way."""
    out = []
    for kind in ("W", "R", "Wp"):
        keys = [k for k in shapes if kind_of(k) == kind and k in home]
        if not keys:
            continue
        claimed: dict[str, np.ndarray] = {}
        slices: dict[str, np.ndarray] = {}
        for k in keys:
            name, pl = home[k]
            idx = flat_index(shape_of[name])[pl.index]
            slices[k] = idx
            claimed[k] = _claimed_map(pl, idx, shapes[k])
        tensors = sorted({base_name(home[k][0]) for k in keys})
        k0 = keys[0]
        rep_s, rep_t = representative(slices[k0].shape, shapes[k0])
        claimed_how = {"copy": (False, "C", False), "reshape": (False, "C", False),
                       "transpose": (True, "C", False)}[home[k0][1].transform]
        claimed_words = reading_name(rep_s, rep_t, claimed_how)
        rep_idx = flat_index(rep_s)
        rep_seen = {read_slice(rep_idx, rep_t, claimed_how).tobytes()}
        seen: set[bytes] = set()
        for how in READINGS:
            rep_map = read_slice(rep_idx, rep_t, how).tobytes()
            if rep_map in rep_seen:  # the same reading as one already listed, at any size
                continue
            rep_seen.add(rep_map)
            maps = {k: read_slice(slices[k], shapes[k], how) for k in keys}
            words = reading_name(rep_s, rep_t, how)
            label = f"{KIND_LABEL[kind]} blocks of {', '.join(f'`{t}`' for t in tensors)}"
            text = (f"{label}: the framework reads each block {words}; the claimed layout reads "
                    f"it {claimed_words}")
            short = f"{kind} blocks read {words} instead of {claimed_words}"
            if all(np.array_equal(maps[k], claimed[k]) for k in keys):
                if how[1] == "C":
                    dims = "x".join(map(str, slices[k0].shape))
                    noops.append((short, f"each {kind} slice is {dims}"))
                continue
            sig = b"".join(maps[k].tobytes() for k in keys)
            if sig in seen:
                continue
            seen.add(sig)

            def apply(trial: Trial, maps=maps) -> None:
                c = dict(trial.canonical)
                for k, m in maps.items():
                    c[k] = trial.native[home[k][0]].ravel()[m].astype(np.float64)
                trial.canonical = c

            hid = f"{'T' if how[0] else ''}{how[1]}{'T' if how[2] else ''}"
            out.append(Mistake(f"reading:{kind}:{hid}", "reading", text, f"reading:{kind}",
                               STAGE_READING, apply, short=short))
    return out


def _claimed_map(pl: Placement, idx: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if pl.transform == "transpose":
        return idx.T
    return idx.reshape(shape)


def _gate_sequences(case: Case, tensors) -> dict[str, tuple[str, list[str]]]:
    """kind -> (a tensor holding it, its gate blocks in storage order) for layer 0."""
    seqs: dict[str, tuple[str, list[str]]] = {}
    first_dir = DIRECTION_NAMES[case.directions[0]]
    for t in tensors:
        for pl in t.placements:
            k = pl.sources[0]
            if not k.startswith(f"layer0/{first_dir}/"):
                continue
            kind = kind_of(k)
            if kind == "Wp":
                continue
            kind = "b" if kind in ("bW", "bR") else kind
            name, seq = seqs.setdefault(kind, (t.name, []))
            if name == t.name:
                seq.append(gate_of(k))
    return seqs


ORDER_KINDS = {"all": ("W", "R", "bW", "bR"), "W": ("W",), "R": ("R",), "b": ("bW", "bR"),
               "p": ("p",)}


def orders(case: Case, tensors) -> list[Mistake]:
    """Gate blocks in another order, per kind or for every kind at once."""
    seqs = _gate_sequences(case, tensors)
    out = []
    for kind, prefixes in ORDER_KINDS.items():
        gates = ("i", "f", "o") if kind == "p" else case.gates
        if kind == "p" and not (case.peepholes):
            continue
        ref_kind = "W" if kind == "all" else kind
        if ref_kind not in seqs:
            continue
        tensor, seq = seqs[ref_kind]
        seq = [g for g in seq if g in gates]
        for perm in itertools.permutations(gates):
            sigma = dict(zip(gates, perm, strict=True))  # claimed gate a is really gate sigma[a]
            if all(a == b for a, b in sigma.items()):
                continue
            truth = [sigma[g] for g in seq]
            where = "every tensor" if kind == "all" else f"`{base_name(tensor)}`"
            what = {"all": "gate blocks", "W": "W gate blocks", "R": "R gate blocks",
                    "b": "bias gate blocks", "p": "peephole blocks"}[kind]
            text = (f"{what} of {where} are in the order {', '.join(truth)}, "
                    f"not {', '.join(seq)}")

            def apply(trial: Trial, sigma=sigma, prefixes=prefixes) -> None:
                c = dict(trial.canonical)
                for layer, d in layer_dirs(trial.case):
                    for x in prefixes:
                        for a, b in sigma.items():
                            src = trial.canonical[key(layer, d, f"{x}_{a}")]
                            c[key(layer, d, f"{x}_{b}")] = src
                trial.canonical = c

            out.append(Mistake(f"order:{kind}:{''.join(perm)}", "order", text, f"order:{kind}",
                               STAGE_ORDER, apply))
    return out

