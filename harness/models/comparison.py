"""``compare_models``: does each recurrent layer of SHIPPED compute what its layer of ORIGINAL
computes? Pairing, then each pairing judged two ways by compare's two judges, which compare
names itself (:mod:`harness.models.judges.weights`, :mod:`harness.models.judges.shipped`;
docs/judges.md), each verdict the core's :class:`~harness.judges.verdict.Verdict`, held in a
:class:`ModelComparison`.

Pairing: each layer of SHIPPED is matched against the layers of ORIGINAL with the same cell,
sizes and directions. Those whose weights agree within rounding are its pairing, all named
(the same weights held twice form one pairing); where none agrees, the nearest by weights
(:func:`.weights_measure.distance`: the values whatever their order, so that a layer holding
the original's weights misplaced is nearest its original) is judged and diagnosed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.errors import HarnessError, WeightsError
from harness.judges.verdict import Verdict
from harness.models.judges.pairing import counts_against, not_run
from harness.models.judges.shipped import SHIPPED_OUTPUTS
from harness.models.judges.weights import WEIGHTS, WeightsFigures
from harness.models.layers import Layer, Unread, read_layers, select_layers, shown
from harness.models.shipped_run import load_inputs
from harness.models.weights_measure import agree, distance


@dataclass(frozen=True)
class Pairing:
    """A shipped layer, the original's layers it is paired with (several where the original
    holds the same weights more than once), and its verdicts: ``weights`` (the weights
    judge's) and ``outputs`` (the shipped-outputs judge's, of the first runtime). ``agreed``:
    the weights of ``originals`` agree with the shipped layer's (False: the nearest,
    judged)."""

    shipped: Layer
    originals: tuple[Layer, ...]
    agreed: bool
    weights: Verdict
    outputs: Verdict
    # other shipped layers holding exactly the shipped layer's weights and semantics (the same
    # node in an If's two branches): one pairing, all named
    also: tuple[Layer, ...] = ()
    # the outputs verdicts of the other runtimes (an ONNX node: OpenVINO beside ONNX Runtime)
    more_outputs: tuple[Verdict, ...] = ()

    @property
    def all_outputs(self) -> tuple[Verdict, ...]:
        return (self.outputs, *self.more_outputs)

    @property
    def verdicts(self) -> tuple[Verdict, ...]:
        """Every verdict of the pairing, the weights' first: what the report shows."""
        return (self.weights, *self.all_outputs)

    @property
    def shipped_all(self) -> tuple[Layer, ...]:
        return (self.shipped, *self.also)

    @property
    def original(self) -> Layer:
        return self.originals[0]

    @property
    def same(self) -> bool:
        """No verdict counts against the pairing
        (:func:`harness.models.judges.pairing.counts_against`): the weights agree, and the
        outputs of every runtime are within the verdict rules or were not run here for a
        reason the report shows (unavailable, not applicable)."""
        return not self.against

    @property
    def against(self) -> tuple[Verdict, ...]:
        """The verdicts that keep the pairing from being the same."""
        return tuple(v for v in self.verdicts if counts_against(v))

    @property
    def not_run(self) -> tuple[Verdict, ...]:
        """The verdicts that could not be judged here (each says why in its reason)."""
        return tuple(v for v in self.verdicts if not_run(v))

    @property
    def findings(self) -> tuple[Verdict, ...]:
        """What the final line names: the weights verdict alone where it differs (the outputs'
        differences follow from it), else every verdict that counts against the pairing."""
        against = self.against
        return (self.weights,) if any(v is self.weights for v in against) else against

    @property
    def mistakes(self) -> tuple[str, ...]:
        """The doctor's named mistakes (the weights verdict's)."""
        figures = self.weights.figures
        return figures.mistakes if isinstance(figures, WeightsFigures) else ()

    def title(self) -> str:
        """``shipped 'rnn' = original's 'gru'`` (or ``~`` where only the nearest)."""
        names = " = ".join(repr(shown(o.path)) for o in self.originals)
        mine = " = ".join(repr(shown(s.path)) for s in self.shipped_all)
        return f"shipped {mine} {'=' if self.agreed else '~'} original's {names}"


@dataclass(frozen=True)
class ModelComparison:
    """Every pairing of SHIPPED's layers with ORIGINAL's; truthy when every one is the same."""

    original: str
    shipped: str
    pairings: tuple[Pairing, ...] = field(default_factory=tuple)
    seconds: float = 0.0
    # layers found but not compared (an ONNX node whose weights depend on a graph input):
    # SHIPPED's keep the comparison from being the same, ORIGINAL's are no candidates
    unread: tuple[Unread, ...] = ()
    unread_original: tuple[Unread, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pairings) and all(p.same for p in self.pairings) and not self.unread

    @property
    def differing(self) -> tuple[Pairing, ...]:
        return tuple(p for p in self.pairings if not p.same)


def label_of(source: Any) -> str:
    return os.fspath(source) if isinstance(source, str | os.PathLike) else type(source).__name__


def same_layers(shipped: list[Layer]) -> list[tuple[Layer, ...]]:
    """The shipped layers grouped: those with exactly the same semantics and weights (the
    same node in an If's two branches) form one group, in model order."""
    groups: list[list[Layer]] = []
    for s in shipped:
        for g in groups:
            if _identical(g[0], s):
                g.append(s)
                break
        else:
            groups.append([s])
    return [tuple(g) for g in groups]


def _identical(a: Layer, b: Layer) -> bool:
    fields = {"source", "name"}
    if a.case.model_dump(exclude=fields) != b.case.model_dump(exclude=fields):
        return False
    ta, tb = a.canonical.tensors, b.canonical.tensors
    return ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta)


def pair_layers(original: list[Layer], shipped: list[Layer]
                ) -> list[tuple[Layer, tuple[Layer, ...], bool]]:
    """(shipped layer, its originals, whether they agree) for each shipped layer. A shipped
    layer with no original of its cell, sizes and directions is refused (WeightsError naming
    the shipped file and both files' layers)."""
    out = []
    for s in shipped:
        candidates = [o for o in original if _pairable(o, s)]
        if not candidates:
            have = "; ".join(f"{shown(o.path)!r}: {o.sizes}" for o in original[:8])
            raise WeightsError(f"layer {shown(s.path)!r} ({s.sizes}) has no layer of the same "
                               f"cell, sizes and direction in {original[0].source} (its "
                               f"layers: {have})", file=s.source)
        agreeing = tuple(o for o in candidates if agree(o, s))
        if agreeing:
            out.append((s, agreeing, True))
        else:
            nearest = min(candidates, key=lambda o: distance(o, s))
            out.append((s, (nearest,), False))
    return out


def _pairable(o: Layer, s: Layer) -> bool:
    # the directions themselves: a reverse layer (a .tflite go_backwards op) holds the reverse
    # direction's weights, which a forward layer's do not pair with
    a, b = o.case, s.case
    return (a.cell, a.input_size, a.hidden_size, a.proj_size, a.dir_mode) == (
        b.cell, b.input_size, b.hidden_size, b.proj_size, b.dir_mode)


def _selected(original: list[Layer], shipped: list[Layer], select: str
              ) -> tuple[list[Layer], list[Layer]]:
    """``select`` names a shipped layer, or else an original one (then every shipped layer
    that can pair with it is judged against it alone)."""
    chosen = select_layers(shipped, select)
    if chosen:
        return original, chosen
    chosen = select_layers(original, select)
    if chosen:
        return chosen, [s for s in shipped if _pairable(chosen[0], s)]
    names = [la.path for la in shipped] + [la.path for la in original]
    raise HarnessError(f"{select!r} names no layer; the layers: "
                       f"{', '.join(repr(shown(n)) for n in names[:12])}", field="--select")


def compare_models(original: Any, shipped: Any, *, select: str | None = None,
                   budget_s: float = 30.0, inputs: Any = None) -> ModelComparison:
    """Does every recurrent layer of ``shipped`` compute what its layer of ``original`` does?

    ``original``, ``shipped``: model files (.pt/.pth/.bin state_dicts, .keras/.h5, .onnx,
    .msgpack) or objects (a torch ``nn.Module``, a Keras layer or model, an ONNX
    ``ModelProto``). ``select``: one layer, by its name or path (``rnn/layer1``), of SHIPPED or
    else of ORIGINAL. ``budget_s``: the doctor's time for each pairing whose weights differ.
    ``inputs``: data for the outputs verdict instead of generated inputs (an .npy/.npz path,
    an array, or arrays by the shipped ONNX model's input names): a main-graph ONNX node sees
    what the model computes for it, a port's layer gets it directly ([batch, steps, features]).

    Returns a :class:`ModelComparison`, truthy when every pairing is the same. Bad input (a
    file that cannot be read, with no recurrent layer, or layers that cannot pair) raises
    :class:`~harness.errors.HarnessError` naming the file."""
    import time

    start = time.perf_counter()
    orig_layers, orig_unread = read_layers(original, "original")
    ship_layers, ship_unread = read_layers(shipped, "shipped")
    data = load_inputs(inputs) if inputs is not None else None
    if select is not None:
        orig_layers, ship_layers = _selected(orig_layers, ship_layers, select)
        ship_unread = []
    groups = {g[0].path: g[1:] for g in same_layers(ship_layers)}
    pairings = []
    heads = [s for s in ship_layers if s.path in groups]
    for s, originals, agreed in pair_layers(orig_layers, heads):
        o = originals[0]
        weights = WEIGHTS.judge(o, s, budget_s=budget_s)
        outputs = SHIPPED_OUTPUTS.judge_all(o, s, data)
        pairings.append(Pairing(s, originals, agreed, weights, outputs[0], groups[s.path],
                                outputs[1:]))
    return ModelComparison(label_of(original), label_of(shipped), tuple(pairings),
                           time.perf_counter() - start, tuple(ship_unread), tuple(orig_unread))


__all__ = ["ModelComparison", "Pairing", "compare_models", "pair_layers"]
