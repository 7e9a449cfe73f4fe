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

import functools
import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from harness.dtypes import FORMATS, native_numpy
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


def block_shapes(case: Case, layer: int) -> Mapping[str, tuple[int, ...]]:
    """NAME -> shape of every canonical block of one layer and direction (read-only, made once
    per model and layer: the layouts ask for it for every tensor they describe)."""
    return layer_block_shapes(*layer_model(case, layer))


def layer_model(case: Case, layer: int) -> tuple:
    """What :func:`block_shapes` reads of the case for one layer, hashable (a cache key)."""
    return (case.cell, case.gates, case.hidden_size, case.proj_size,
            case.layer_input_size(layer), case.peepholes)


@functools.cache
def layer_block_shapes(cell: str, gates: tuple[str, ...], H: int, P: int, in_l: int,
                       peepholes: bool) -> Mapping[str, tuple[int, ...]]:
    """:func:`block_shapes` of a :func:`layer_model`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for g in gates:
        shapes[f"W_{g}"] = (H, in_l)
    for g in gates:
        shapes[f"R_{g}"] = (H, P or H)
    for g in gates:
        shapes[f"bW_{g}"] = (H,)
    for g in gates:
        shapes[f"bR_{g}"] = (H,)
    if cell == "lstm" and peepholes:
        for g in ("i", "f", "o"):
            shapes[f"p_{g}"] = (H,)
    if cell == "lstm" and P:
        shapes["Wp"] = (P, H)
    return MappingProxyType(shapes)


def expected_shapes(case: Case) -> Mapping[str, tuple[int, ...]]:
    """Canonical key -> shape of every block, in canonical order (read-only, made once per
    model: a pair's conversion plan and divergence rows read it)."""
    return _expected_shapes(*model_of(case))


def model_of(case: Case) -> tuple:
    """(each layer's :func:`layer_model`, the directions run): what the shapes of all blocks
    depend on, hashable (a key for what is kept per model)."""
    return tuple(layer_model(case, layer) for layer in range(case.num_layers)), case.directions


def forget_shapes() -> None:
    """Forget the block shapes kept per model (a new process's state)."""
    for cached in (layer_block_shapes, _expected_shapes):
        cached.cache_clear()


@functools.cache
def _expected_shapes(layers: tuple[tuple, ...], directions: tuple[int, ...]
                     ) -> Mapping[str, tuple[int, ...]]:
    return MappingProxyType({
        key(layer, d, name): shape
        for layer, model in enumerate(layers) for d in directions
        for name, shape in layer_block_shapes(*model).items()
    })


@dataclass
class Canonical:
    """Canonical tensors of a case, keyed as in the ``canonical`` weight-file contract."""

    tensors: dict[str, np.ndarray]
    _cast: dict = field(default_factory=dict, repr=False, compare=False)

    def __getitem__(self, k: str) -> np.ndarray:
        return self.tensors[k]

    def cast(self, dtype: type) -> dict[str, np.ndarray]:
        """The tensors cast to ``dtype``: read-only views of one array (:meth:`span`), made
        once and kept (a case's adapters copy their natives from it: half the bytes to read
        for float32); float64: the tensors themselves. The tensors are not to change
        afterwards."""
        dtype = np.dtype(dtype)
        if dtype == np.float64:
            return self.tensors
        return self._buffer(dtype)[1]

    def _buffer(self, dtype: np.dtype) -> tuple[np.ndarray, dict[str, np.ndarray],
                                                 dict[str, int]]:
        """(every tensor cast to ``dtype`` and laid end to end in C order, in the order of
        :attr:`tensors`; name -> its view of it; name -> where it starts), read-only, made once
        and kept."""
        k = ("buffer", dtype)
        if k not in self._cast:
            flat = np.empty(sum(v.size for v in self.tensors.values()), dtype=dtype)
            if self.tensors:
                np.concatenate([v.reshape(-1) for v in self.tensors.values()], out=flat,
                               casting="same_kind")
            self._keep_cast(flat)
        return self._cast[k]

    def _keep_cast(self, flat: np.ndarray) -> None:
        """Keep ``flat`` (every tensor in another dtype, laid end to end in the order of
        :attr:`tensors`) as :meth:`cast`'s array for its dtype, made read-only."""
        sizes = [v.size for v in self.tensors.values()]
        flat.flags.writeable = False
        starts = dict(zip(self.tensors, itertools.accumulate(sizes, initial=0), strict=False))
        views = {name: flat[starts[name]:starts[name] + v.size].reshape(v.shape)
                 for name, v in self.tensors.items()}
        self._cast["buffer", flat.dtype] = flat, views, starts

    def span(self, dtype: type, keys: tuple[str, ...]) -> np.ndarray | None:
        """The tensors of ``keys`` cast to ``dtype`` and laid end to end as one read-only 1-D
        view of :meth:`cast`'s array (float64 too: a copy of the tensors made for it), None
        where they do not lie there one after the other. Worked out once per (dtype, keys)."""
        dtype = np.dtype(dtype)
        k = ("span", dtype, keys)
        if k not in self._cast:
            flat, _, starts = self._buffer(dtype)
            lo = end = starts[keys[0]]
            for name in keys:
                if starts[name] != end:
                    self._cast[k] = None
                    return None
                end += self.tensors[name].size
            self._cast[k] = flat[lo:end]
        return self._cast[k]

    def raveled(self, dtype: type, keys: tuple[str, ...]) -> list[np.ndarray]:
        """The tensors of ``keys`` cast to ``dtype``, each as a 1-D view in C order, the list
        made once per (dtype, keys) and kept like :meth:`cast` (a large case's natives are
        concatenated from it)."""
        k = ("raveled", np.dtype(dtype), keys)
        if k not in self._cast:
            cast = self.cast(dtype)
            self._cast[k] = [cast[name].reshape(-1) for name in keys]
        return self._cast[k]

    def __getstate__(self) -> dict:  # sent to a worker process without the casts
        return {"tensors": self.tensors, "_cast": {}}

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
    Rounded to a lower case dtype in place through one cast of that array, which is kept as
    :meth:`Canonical.cast`'s (the adapters convert from it)."""
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
    canonical = Canonical(tensors)
    if case.dtype != "float64":
        low = flat.astype(FORMATS[case.dtype].numpy)
        flat[...] = low  # every tensor rounded to the case dtype, as round_to does
        if low.dtype == np.dtype(native_numpy(case.dtype)):
            canonical._keep_cast(low)
    return canonical
