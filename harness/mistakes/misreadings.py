"""The plausible ways to misread a weights file, as transformations of the claimed reading.

A weights file is read through a *claimed* layout (``Layout.from_native``) into canonical
parameters. Each :class:`Mistake` says how the framework that produced the outputs really read
the same file, as a transformation of that reading:

- ``reshape``   a native tensor filled with ``x.reshape`` where ``x.T`` belonged, or the reverse
                (docs/layouts.md, Reading a divergence signature P2), applied to the native tensor
                before reading;
- ``reading``   every gate block of one kind (W, R, Wp) read from its slice another way:
                as stored, transposed, or a C-/F-order reshape (P1, P2b: cuDNN buffers);
- ``order``     the gate blocks of one kind (W, R, biases, peepholes) or of all of them are in
                another of the 24 LSTM / 6 GRU orders (P3, P7, P10b);
- ``bias``      a dropped input or recurrent bias, biases counted twice or half (P5), GRU
                ``bR_n`` summed into ``bW_n`` (split vs summed bias); a bias half missing from
                the file (:func:`missing_bias_half`: a Keras bias set from torch's ``bias_ih``
                alone), whose values only the outputs can give (fitted by the doctor);
- ``forget``    a forget-gate offset of ±1 (or ±forget_bias) added at run time by one side (P4);
- ``swap``      input and recurrent kernels swapped; forward and backward directions swapped;
- ``variant``   GRU reset_after flipped (P6), the update gate inverted (P8), another recurrent
                activation (P12): the case, not the weights, is what differs;
- ``data``      batch-major input read as time-major, (h0, c0) swapped (P11).

Each mistake acts on every layer and direction alike. In a real file a mistake is often in one
tensor of one layer: :func:`local_catalogue` confines the weight mistakes (every family but
``variant`` and ``data``) to one layer and direction (:func:`scoped`), and adds the swap of one
layer's two directions (:func:`swap_layer_directions`); the doctor searches them layer by layer.

Transformations are built from index maps computed on the claimed layout's own description,
so a mistake that is a no-op at a case's sizes (a transpose of a [1, 1] block, a reshape of a
[H, 1] slice) is recognised as such: the case cannot tell it from the claim (:attr:`noops`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.layouts.base import Layout, Placement
from harness.params import DIRECTION_NAMES, block_shapes, key, layer_dirs
from harness.spec import Case

ACTIVATIONS = ("sigmoid", "hard_sigmoid_tf_keras", "hard_sigmoid_keras3")
KIND_LABEL = {"W": "input-weight (W)", "R": "recurrent-weight (R)", "Wp": "projection (Wp)"}
# stage order in which a hypothesis applies its mistakes
STAGE_RESHAPE, STAGE_READING, STAGE_ORDER, STAGE_OTHER = 0, 1, 2, 3
# one layer's directions swapped: after every mistake confined to that layer, which name the
# slot the weights were read from (the other direction's)
STAGE_MOVE = 4
# the families a mistake confined to one layer and direction can come from: the case (variant)
# and the data are not per layer
LOCAL_FAMILIES = ("reshape", "reading", "order", "bias", "forget", "swap")


@dataclass
class Trial:
    """A hypothesis being applied: the file's tensors, the reading so far, case and data."""

    native: dict[str, np.ndarray]
    canonical: dict[str, np.ndarray] | None
    case: Case
    time_major: bool = False
    swap_states: bool = False


@dataclass(frozen=True)
class Mistake:
    """One way the file may really have been read. ``apply`` edits a :class:`Trial` in place
    (assigning new arrays, never writing into shared ones)."""

    id: str
    family: str  # reshape | reading | order | bias | forget | swap | variant | data
    text: str  # the mistake in words: what the claimed reading gets wrong
    slot: str  # two mistakes in one hypothesis never share a slot
    stage: int
    apply: Callable[[Trial], None] = field(compare=False, repr=False)
    fixable: bool = True  # a corrected weights file can absorb it (not: case or data changes)
    short: str = ""  # a shorter wording that needs no claimed layout (blind-spot notes)

    @property
    def brief(self) -> str:
        return self.short or self.text


def kind_of(k: str) -> str:
    """Canonical kind of a key: W, R, bW, bR, p or Wp."""
    name = k.rsplit("/", 1)[1]
    return name if name == "Wp" else name.split("_")[0]


def gate_of(k: str) -> str:
    return k.rsplit("/", 1)[1].split("_", 1)[1]


def base_name(name: str) -> str:
    """A native tensor name without its layer/direction scoping (``layer1/backward/kernel`` ->
    ``kernel``, ``weight_hh_l1_reverse`` -> ``weight_hh``)."""
    name = re.sub(r"^layer\d+/((forward|backward)/)?", "", name)
    return re.sub(r"_l\d+(_reverse)?$", "", name)


def _flat_index(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(int(np.prod(shape)) if shape else 1).reshape(shape)


# Readings of a 2-D slice S into a [H, n] block, simplest first; (pre-transpose, order, post).
READINGS: tuple[tuple[bool, str, bool], ...] = tuple(
    (pre, order, post) for post in (False, True) for order in ("C", "F") for pre in (False, True))


def read_slice(S: np.ndarray, target: tuple[int, ...], how: tuple[bool, str, bool]) -> np.ndarray:
    pre, order, post = how
    X = S.T if pre else S
    Y = X.reshape(target[::-1] if post else target, order=order)
    return Y.T if post else Y


def representative(S_shape: tuple[int, ...], target: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes at which every reading of a slice is distinct, keeping the slice's orientation
    and squareness: names a reading by what it does, even where the case's sizes (a [H, 1]
    slice, a [1, 1] block) make it coincide with another."""
    H, n = target
    rH, rn = (5, 5) if H == n else (7, 5)
    if len(S_shape) == 1:
        return (rH * rn,), (rH, rn)
    rep = {H: rH, n: rn} if H != n else {H: rH}
    oriented = (rn, rH) if (S_shape == (n, H) and H != n) else (rH, rn)
    return (oriented if len(S_shape) == 2 else tuple(rep.get(d, d) for d in S_shape)), (rH, rn)


def reading_name(S_shape: tuple[int, ...], target: tuple[int, ...], how: tuple[bool, str, bool],
                 *, note: bool = True) -> str:
    """Words for a reading of a slice of shape ``S_shape`` into ``target`` ([H, n])."""
    idx = _flat_index(S_shape)
    m = read_slice(idx, target, how)
    if idx.shape == target and np.array_equal(m, idx):
        return "as stored (not transposed)"
    if idx.T.shape == target and np.array_equal(m, idx.T):
        return "transposed"
    pre, order, post = how
    mid = "[in, H], then transposed" if post else "[H, in]"
    text = f"{'transposed, then ' if pre else ''}{order}-order reshaped to {mid}"
    if (pre, order, post) == (False, "C", False) and note:
        text += " (how cuDNN reads a flat buffer slice)"
    return text


@dataclass
class Catalogue:
    """Every single mistake for a case read through a claimed layout, plus the ones that are
    no-ops at the case's sizes (``noops``: (text, why)) and the ones that cannot happen at all
    (``impossible``: a swap of differently shaped tensors)."""

    mistakes: list[Mistake]
    noops: list[tuple[str, str]]
    impossible: list[tuple[str, str]] = field(default_factory=list)


def catalogue(case: Case, layout: Layout) -> Catalogue:
    """The single mistakes for ``case`` read through ``layout`` (structure only: no values)."""
    tensors = layout.tensors(case)
    shape_of = {t.name: t.shape for t in tensors}
    # canonical key -> (tensor, placement) holding it (first source of a placement)
    home: dict[str, tuple[str, Placement]] = {}
    for t in tensors:
        for pl in t.placements:
            home.setdefault(pl.sources[0], (t.name, pl))
    shapes = {key(la, d, n): s for la, d in layer_dirs(case)
              for n, s in block_shapes(case, la).items()}
    mistakes: list[Mistake] = []
    noops: list[tuple[str, str]] = []

    mistakes += _reshapes(case, tensors, noops)
    mistakes += _readings(case, home, shape_of, shapes, noops)
    mistakes += _orders(case, tensors)
    mistakes += _biases(case)
    impossible: list[tuple[str, str]] = []
    mistakes += _swaps(case, impossible)
    mistakes += _variants(case)
    mistakes += _data(case, noops)
    return Catalogue(mistakes, noops, impossible)


# Families --------------------------------------------------------------------------------------

def _reshapes(case: Case, tensors, noops) -> list[Mistake]:
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
            if all(np.array_equal(m, _flat_index(shape_t)) for m, shape_t
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
    idx = _flat_index(shape)
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


def _readings(case: Case, home, shape_of, shapes, noops) -> list[Mistake]:
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
            idx = _flat_index(shape_of[name])[pl.index]
            slices[k] = idx
            claimed[k] = _claimed_map(pl, idx, shapes[k])
        tensors = sorted({base_name(home[k][0]) for k in keys})
        k0 = keys[0]
        rep_s, rep_t = representative(slices[k0].shape, shapes[k0])
        claimed_how = {"copy": (False, "C", False), "reshape": (False, "C", False),
                       "transpose": (True, "C", False)}[home[k0][1].transform]
        claimed_words = reading_name(rep_s, rep_t, claimed_how)
        rep_idx = _flat_index(rep_s)
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


def _orders(case: Case, tensors) -> list[Mistake]:
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


def _scale_biases(factor_w: float, factor_r: float) -> Callable[[Trial], None]:
    def apply(trial: Trial) -> None:
        c = dict(trial.canonical)
        for k, v in trial.canonical.items():
            kind = kind_of(k)
            if kind == "bW":
                c[k] = v * factor_w
            elif kind == "bR":
                c[k] = v * factor_r
        trial.canonical = c
    return apply


def _biases(case: Case) -> list[Mistake]:
    out = [
        Mistake("bias:drop-bR", "bias", "the outputs were computed without the recurrent bias "
                "bR: your reading adds a second bias the framework does not have",
                "bias", STAGE_OTHER, _scale_biases(1.0, 0.0)),
        Mistake("bias:drop-bW", "bias", "the outputs were computed without the input bias bW",
                "bias", STAGE_OTHER, _scale_biases(0.0, 1.0)),
        Mistake("bias:none", "bias", "the outputs were computed with no bias at all",
                "bias", STAGE_OTHER, _scale_biases(0.0, 0.0)),
        Mistake("bias:twice", "bias", "the framework adds the biases twice (one bias vector "
                "counted as both bW and bR)", "bias", STAGE_OTHER, _scale_biases(2.0, 2.0)),
        Mistake("bias:half", "bias", "your reading counts the biases twice (the framework adds "
                "them once)", "bias", STAGE_OTHER, _scale_biases(0.5, 0.5)),
    ]
    if case.cell_kind.separate_biases(case.reset_after):
        def fold(trial: Trial) -> None:
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                bw, br = key(layer, d, "bW_n"), key(layer, d, "bR_n")
                c[bw] = trial.canonical[bw] + trial.canonical[br]
                c[br] = np.zeros_like(trial.canonical[br])
            trial.canonical = c
        out.append(Mistake("bias:sum-n", "bias", "bR_n is applied outside r * (...): the n-gate "
                           "biases were summed into one (split vs summed bias)", "bias",
                           STAGE_OTHER, fold))
    if "f" in case.gates and not case.input_forget:  # with f = 1 - i no offset can act
        offsets = {1.0, -1.0}
        if case.forget_bias not in (0.0, 1.0, -1.0):
            offsets |= {case.forget_bias, -case.forget_bias}
        for delta in sorted(offsets, reverse=True):
            def shift(trial: Trial, delta=delta) -> None:
                c = dict(trial.canonical)
                for layer, d in layer_dirs(trial.case):
                    k = key(layer, d, "bW_f")
                    c[k] = trial.canonical[k] + delta
                trial.canonical = c
            text = (f"the framework adds {delta:+g} to the forget gate at run time (TF1 LSTMCell, "
                    "BlockLSTM, Haiku) that your reading does not" if delta > 0 else
                    f"your reading adds {-delta:g} to the forget gate that the framework does not "
                    "(the offset is already in the stored bias, or it has none)")
            out.append(Mistake(f"forget:{delta:+g}", "forget", text, "forget", STAGE_OTHER, shift))
    return out


def _swaps(case: Case, impossible) -> list[Mistake]:
    out = []
    if case.num_directions == 2:
        def swap_dirs(trial: Trial) -> None:
            c = {}
            for k, v in trial.canonical.items():
                layer, direction, name = k.split("/")
                other = "backward" if direction == "forward" else "forward"
                c[f"{layer}/{other}/{name}"] = v
            trial.canonical = c
        out.append(Mistake("swap:directions", "swap", "forward and backward weights are swapped",
                           "swap:directions", STAGE_OTHER, swap_dirs))
    layers = [la for la in range(case.num_layers) if case.layer_input_size(la) == case.out_size
              and case.out_size == case.hidden_size]
    text = "input and recurrent kernels are swapped (W <-> R)"
    if len(layers) == case.num_layers:
        def swap_wr(trial: Trial) -> None:
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                for g in trial.case.gates:
                    w, r = key(layer, d, f"W_{g}"), key(layer, d, f"R_{g}")
                    c[w], c[r] = trial.canonical[r], trial.canonical[w]
            trial.canonical = c
        out.append(Mistake("swap:W-R", "swap", text, "swap:W-R", STAGE_OTHER, swap_wr))
    else:
        impossible.append((text, "W and R have different shapes"))
    return out


def _variants(case: Case) -> list[Mistake]:
    out = []
    if case.cell_kind.reads("reset_after"):
        flip = not case.reset_after

        def reset(trial: Trial) -> None:
            trial.case = trial.case.model_copy(update={"reset_after": flip})
        out.append(Mistake(
            "variant:reset_after", "variant",
            f"the outputs were computed reset-{'after' if flip else 'before'} (reset_after="
            f"{str(flip).lower()}), the case says reset_after={str(case.reset_after).lower()}",
            "variant:reset", STAGE_OTHER, reset, fixable=False))

        def invert(trial: Trial) -> None:
            # h' = z n + (1 - z) h is h' = (1 - z') n + z' h with z' = 1 - z = sigmoid(-a_z)
            c = dict(trial.canonical)
            for layer, d in layer_dirs(trial.case):
                for x in ("W", "R", "bW", "bR"):
                    k = key(layer, d, f"{x}_z")
                    c[k] = -trial.canonical[k]
            trial.canonical = c
        if case.recurrent_activation == "sigmoid":
            out.append(Mistake("variant:update", "variant", "the update gate is used the other way "
                               "round: h' = z * n + (1 - z) * h", "variant:update", STAGE_OTHER,
                               invert))
    for act in ACTIVATIONS:
        if act == case.recurrent_activation:
            continue

        def activation(trial: Trial, act=act) -> None:
            trial.case = trial.case.model_copy(update={"recurrent_activation": act})
        out.append(Mistake(f"variant:{act}", "variant", f"the outputs were computed with "
                           f"recurrent_activation {act}, the case says {case.recurrent_activation}",
                           "variant:activation", STAGE_OTHER, activation, fixable=False))
    return out


ZERO_STATES = ("the initial states (h0, c0) swapped", "they are zero")
"""The no-op of a case whose initial states are zero: not a blind spot of its weights but a
part of the API the case does not exercise (:attr:`harness.blind.BlindCheck.notes`)."""


def _data(case: Case, noops) -> list[Mistake]:
    out = []
    zero_state = case.initial_state != "random"
    if case.seq_lengths is None and (zero_state or case.batch == case.seq_len):
        def time_major(trial: Trial) -> None:
            trial.time_major = True
        out.append(Mistake("data:time-major", "data", "the batch-major input [B, T, I] was fed to "
                           "a time-major API (or the reverse): batch and time axes are swapped",
                           "data:major", STAGE_OTHER, time_major, fixable=False))
    if case.cell_kind.has_cell_state and not case.proj_size and not zero_state:
        def swap_states(trial: Trial) -> None:
            trial.swap_states = True
        out.append(Mistake("data:h0-c0", "data", "the initial states (h0, c0) were passed as "
                           "(c0, h0) (TF1 LSTMStateTuple and Flax carry are (c, h))",
                           "data:states", STAGE_OTHER, swap_states, fixable=False))
    elif case.cell_kind.has_cell_state and zero_state:
        noops.append(ZERO_STATES)
    return out


def missing_bias_half(case: Case, delta: dict[str, np.ndarray]) -> Mistake:
    """The file holds one half of a split bias pair and the framework ran with both: a Keras
    (or BlockLSTM, cuDNN ...) bias set from PyTorch's ``bias_ih`` without ``bias_hh``, or the
    other half. ``delta``: the missing half per canonical key (``bR_g``; GRU reset-after also
    ``bW_n``, which acts outside ``r * (...)``), fitted to the outputs by
    :func:`harness.doctor.fit.fit_missing_bias`, since no transformation of the file can give it."""
    def add(trial: Trial) -> None:
        c = dict(trial.canonical)
        for k, v in delta.items():
            c[k] = trial.canonical[k] + v
        trial.canonical = c

    return Mistake("bias:missing-half", "bias",
                   "the file holds one half of a split bias pair and the framework ran with "
                   "both (e.g. a Keras bias set from PyTorch's bias_ih without bias_hh): the "
                   "missing half, fitted to the expected outputs, is added in the corrected "
                   "weights", "bias", STAGE_OTHER, add,
                   short="one half of a split bias pair missing from the file")


# Mistakes confined to one layer and direction ---------------------------------------------------

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
