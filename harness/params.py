"""Canonical parameters: the framework-neutral weights every layout converts to and from.

Keys follow the ``canonical`` weight-file contract: ``layer{k}/{forward|backward}/NAME`` with
NAME in ``W_g R_g bW_g bR_g`` per gate g (LSTM i, f, g, o; GRU r, z, n), plus ``p_i p_f p_o``
(peepholes) and ``Wp`` (projection). Shapes (math orientation):

    W_g [H, in_l]   R_g [H, P or H]   bW_g, bR_g, p_g [H]   Wp [P, H]

Generated tensors are deliberately unlike each other, so that layout mistakes show: each gate
has its own scale and offset, the input and recurrent biases are both nonzero and different,
and peepholes are nonzero. Everything is rounded to the case dtype and kept as float64.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from harness.dtypes import FORMATS
from harness.spec import Case

DIRECTION_NAMES = ("forward", "backward")

# gate -> (weight scale multiplier, input-bias offset); the recurrent bias gets another offset
GATE_STYLE = {
    "i": (1.0, 0.10), "f": (0.8, 0.45), "g": (1.25, -0.10), "o": (0.9, -0.30),
    "r": (1.0, 0.20), "z": (0.8, -0.35), "n": (1.25, 0.10),
}


def key(layer: int, direction: int, name: str) -> str:
    return f"layer{layer}/{DIRECTION_NAMES[direction]}/{name}"


def layer_dirs(case: Case) -> Iterator[tuple[int, int]]:
    """(layer, direction) pairs in canonical order: layer-major, forward before reverse."""
    for layer in range(case.num_layers):
        for d in case.directions:
            yield layer, d


def block_shapes(case: Case, layer: int) -> dict[str, tuple[int, ...]]:
    """NAME -> shape of every canonical block of one layer and direction, in canonical order."""
    H, P, in_l = case.hidden_size, case.proj_size, case.layer_input_size(layer)
    shapes: dict[str, tuple[int, ...]] = {}
    for g in case.gates:
        shapes[f"W_{g}"] = (H, in_l)
    for g in case.gates:
        shapes[f"R_{g}"] = (H, P or H)
    for g in case.gates:
        shapes[f"bW_{g}"] = (H,)
    for g in case.gates:
        shapes[f"bR_{g}"] = (H,)
    if case.peepholes:
        for g in ("i", "f", "o"):
            shapes[f"p_{g}"] = (H,)
    if P:
        shapes["Wp"] = (P, H)
    return shapes


def expected_shapes(case: Case) -> dict[str, tuple[int, ...]]:
    """Canonical key -> shape of every block, in canonical order."""
    return {key(layer, d, name): shape for layer, d in layer_dirs(case)
            for name, shape in block_shapes(case, layer).items()}


@dataclass
class Canonical:
    """Canonical tensors of a case, keyed as in the ``canonical`` weight-file contract."""

    tensors: dict[str, np.ndarray]

    def __getitem__(self, k: str) -> np.ndarray:
        return self.tensors[k]

    def get(self, layer: int, direction: int, name: str) -> np.ndarray | None:
        return self.tensors.get(key(layer, direction, name))

    def block(self, layer: int, direction: int) -> dict[str, np.ndarray]:
        """NAME -> tensor for one layer and direction."""
        prefix = key(layer, direction, "")
        return {k[len(prefix):]: v for k, v in self.tensors.items() if k.startswith(prefix)}


def generate(case: Case) -> Canonical:
    """Random canonical parameters from the case seed, rounded to the case dtype.

    Drawn as ``Generator.uniform(-s, s)`` (or ``normal(0, s)``) per tensor in the order of
    :func:`expected_shapes` would draw them, with the same bits: the stream's values for all
    tensors at once into one float64 array the tensors are views of, then each tensor's
    ``low + (high - low) * u`` (``0 + s * z``) and its gate's multiplier or offset in place.
    Rounded to a lower case dtype in place through one cast of that array."""
    from harness.spec import GeneratedTensors

    spec = case.weights if isinstance(case.weights, GeneratedTensors) else GeneratedTensors()
    scale = spec.scale or 1.0 / np.sqrt(case.hidden_size)
    rng = np.random.default_rng([case.seed, 1])
    shapes = expected_shapes(case)
    flat = np.empty(sum(math.prod(shape) for shape in shapes.values()))
    if spec.init == "normal":
        rng.standard_normal(out=flat)
    else:
        rng.random(out=flat)

    def drawn(t: np.ndarray, s: float) -> None:  # t holds the stream's values for it
        if spec.init == "normal":
            t *= s
            t += 0.0
        else:
            t *= s - -s
            t += -s

    tensors, lo = {}, 0
    for k, shape in shapes.items():
        t = flat[lo:lo + math.prod(shape)].reshape(shape)
        lo += t.size
        name = k.rsplit("/", 1)[1]
        kind, _, g = name.partition("_")
        mult, offset = GATE_STYLE.get(g, (1.0, 0.0))
        if kind in ("W", "R"):
            drawn(t, scale)
            if mult != 1.0:
                t *= mult
        elif kind == "bW":
            drawn(t, 0.5 * scale)
            t += offset
        elif kind == "bR":
            drawn(t, 0.5 * scale)
            t += -0.5 * offset + 0.05
        elif kind == "p":
            drawn(t, 0.5 * scale)
            t += {"i": 0.3, "f": -0.2, "o": 0.25}[g]
        elif name == "Wp":
            drawn(t, scale)
        else:  # pragma: no cover - expected_shapes only makes the names above
            raise AssertionError(name)
        tensors[k] = t
    if case.dtype != "float64":  # every tensor rounded to the case dtype, as round_to does
        flat[...] = flat.astype(FORMATS[case.dtype].numpy)
    return Canonical(tensors)
