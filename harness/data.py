"""Inputs and outputs in the harness's one convention (PyTorch's, batch-major).

    x            [B, T, input_size]
    h0, h_n      [num_layers * num_directions, B, P or H]   layer-major, forward before reverse
    c0, c_n      [num_layers * num_directions, B, H]
    y            [B, T, num_directions * (P or H)]          forward features first
    seq_lengths  [B] int64

Padded steps past a sequence's length are zero in ``y``; ``h_n``/``c_n`` are the states at each
sequence's last valid step.

Gradients (``gradients: true`` cases) are of the scalar loss

    L = Σ dy ⊙ y + Σ dh_n ⊙ h_n + Σ dc_n ⊙ c_n

with the upstream gradients ``dy``, ``dh_n``, ``dc_n`` shaped like ``y``, ``h_n``, ``c_n`` (``dy``
is zero at padded steps). :class:`Gradients` holds dL/dx [B, T, I], dL/dh0, dL/dc0 (shaped like
h0, c0) and dL/dθ for every parameter θ, keyed canonically (``layer{k}/{dir}/NAME``) or, as an
adapter returns them, by native tensor name (the adapter base maps them through the layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.dtypes import round_to
from harness.params import block_shapes, key, layer_dirs
from harness.spec import Case, GeneratedTensors

if TYPE_CHECKING:
    from harness.handed import Handed


@dataclass
class Inputs:
    x: np.ndarray
    h0: np.ndarray
    c0: np.ndarray | None  # None for GRU
    seq_lengths: np.ndarray | None  # None: every sequence is seq_len long
    dy: np.ndarray | None = None  # upstream gradients (gradient cases only)
    dh_n: np.ndarray | None = None
    dc_n: np.ndarray | None = None  # None for GRU

    @property
    def lengths(self) -> np.ndarray:
        B, T = self.x.shape[:2]
        return self.seq_lengths if self.seq_lengths is not None else np.full(B, T, dtype=np.int64)

    def mapped(self, f: Callable[[np.ndarray], Any]) -> Inputs:
        """Every array through ``f`` (e.g. onto a device), None kept; ``seq_lengths`` stays as
        it is (the reference reads the lengths on the host)."""
        return Inputs(x=f(self.x), h0=f(self.h0), c0=_maybe(f, self.c0),
                      seq_lengths=self.seq_lengths, dy=_maybe(f, self.dy),
                      dh_n=_maybe(f, self.dh_n), dc_n=_maybe(f, self.dc_n))


@dataclass
class Gradients:
    """dL/dx [B, T, I], dL/dh0 [L*D, B, P or H], dL/dc0 [L*D, B, H] (None for GRU), and
    ``params``: dL/dθ per parameter tensor (canonical or native keys, see the module text)."""

    dx: np.ndarray
    dh0: np.ndarray
    dc0: np.ndarray | None
    params: dict[str, np.ndarray]

    def named(self) -> dict[str, np.ndarray]:
        """The saved form (docs/cases.md, "Gradients"): ``dx``, ``dh0``, ``dc0``, ``grad/<canonical
        key>``."""
        out = {"dx": self.dx, "dh0": self.dh0}
        if self.dc0 is not None:
            out["dc0"] = self.dc0
        out.update({f"grad/{k}": v for k, v in self.params.items()})
        return out

    def mapped(self, f: Callable[[np.ndarray], Any]) -> Gradients:
        """Every array through ``f`` (e.g. back from a device), None kept."""
        return Gradients(dx=f(self.dx), dh0=f(self.dh0), dc0=_maybe(f, self.dc0),
                         params={k: f(v) for k, v in self.params.items()})


@dataclass
class Outputs:
    """What an adapter returns. ``y_layers`` (optional) holds every layer's ``y``; ``grads``
    the backward pass of a gradient case; ``models`` the model files the adapter made and ran
    (file suffix -> bytes, e.g. an exported ``.onnx``), which ``--save-outputs`` writes beside
    the outputs so the very graph that diverged can be opened; ``note`` what the adapter learnt
    only by running (the LiteRT adapters: which form the converter emitted), added to the
    pair's reason. ``absent``: outputs the adapter's model does not have (output name, e.g.
    ``h_n`` or ``c_n`` -> why: a deployed model that outputs ``y`` only), left as None, not
    compared, the why added to the pair's reason."""

    y: np.ndarray
    h_n: np.ndarray | None
    c_n: np.ndarray | None = None
    y_layers: list[np.ndarray] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    grads: Gradients | None = None
    models: dict[str, bytes] = field(default_factory=dict)
    note: str = ""
    # what the adapter handed its framework (harness/handed.py), for a reproducer
    handed: Handed | None = None
    absent: dict[str, str] = field(default_factory=dict)
    # a quantized model's weights as stored and grids (harness.grids.QuantizedModel):
    # the pair is judged by harness.quantization.judge
    quantized: Any = None

    def named(self) -> dict[str, np.ndarray]:
        """The outputs there are (an :attr:`absent` one is left out)."""
        out = {"y": self.y}
        if self.h_n is not None:
            out["h_n"] = self.h_n
        if self.c_n is not None:
            out["c_n"] = self.c_n
        return out

    def saved(self) -> dict[str, np.ndarray]:
        """Everything ``--save-outputs`` writes: the outputs and, when present, the gradients."""
        return self.named() | (self.grads.named() if self.grads is not None else {})

    def mapped(self, f: Callable[[np.ndarray], Any]) -> Outputs:
        """Every array through ``f`` (e.g. back from a device), None kept."""
        return Outputs(y=f(self.y), h_n=_maybe(f, self.h_n), c_n=_maybe(f, self.c_n),
                       y_layers=None if self.y_layers is None else [f(y) for y in self.y_layers],
                       extras={k: f(v) for k, v in self.extras.items()},
                       grads=None if self.grads is None else self.grads.mapped(f),
                       models=dict(self.models), note=self.note, handed=self.handed,
                       absent=dict(self.absent), quantized=self.quantized)

    def absent_note(self) -> str:
        """The pair's words for the outputs not compared (:attr:`absent`), or ''."""
        return "; ".join(f"{name} not compared: {why}" for name, why in self.absent.items())


def _maybe(f: Callable[[np.ndarray], Any], a: np.ndarray | None) -> Any:
    return None if a is None else f(a)


def state_shapes(case: Case) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = case.num_layers * case.num_directions
    return (n, case.batch, case.out_size), (n, case.batch, case.hidden_size)


def output_shapes(case: Case) -> dict[str, tuple[int, ...]]:
    h_shape, c_shape = state_shapes(case)
    shapes = {"y": (case.batch, case.seq_len, case.num_directions * case.out_size), "h_n": h_shape}
    if case.cell_kind.has_cell_state:
        shapes["c_n"] = c_shape
    return shapes


def gradient_shapes(case: Case) -> dict[str, tuple[int, ...]]:
    """Shapes of a gradient case's gradients, named as saved (:meth:`Gradients.named`)."""
    h_shape, c_shape = state_shapes(case)
    shapes = {"dx": (case.batch, case.seq_len, case.input_size), "dh0": h_shape}
    if case.cell_kind.has_cell_state:
        shapes["dc0"] = c_shape
    for layer, d in layer_dirs(case):
        for name, s in block_shapes(case, layer).items():
            shapes[f"grad/{key(layer, d, name)}"] = s
    return shapes


def generate(case: Case) -> Inputs:
    """Inputs drawn from the case seed, rounded to the case dtype."""
    spec = case.inputs if isinstance(case.inputs, GeneratedTensors) else GeneratedTensors()
    scale = spec.scale or 1.0
    rng = np.random.default_rng([case.seed, 2])

    def draw(shape: tuple[int, ...], s: float) -> np.ndarray:
        if spec.init == "normal":
            t = rng.normal(0.0, s, size=shape)
        else:
            t = rng.uniform(-s, s, size=shape)
        return round_to(t, case.dtype)

    x = draw((case.batch, case.seq_len, case.input_size), scale)
    h_shape, c_shape = state_shapes(case)
    if case.initial_state == "random":
        h0 = draw(h_shape, 0.5)
        c0 = draw(c_shape, 1.0) if case.cell_kind.has_cell_state else None
    else:
        h0 = np.zeros(h_shape)
        c0 = np.zeros(c_shape) if case.cell_kind.has_cell_state else None
    lengths = np.asarray(case.seq_lengths, dtype=np.int64) if case.seq_lengths else None
    inputs = Inputs(x=x, h0=h0, c0=c0, seq_lengths=lengths)
    return with_upstream(case, inputs) if case.gradients else inputs


def with_upstream(case: Case, inputs: Inputs) -> Inputs:
    """``inputs`` with upstream gradients drawn from the case seed where it has none: ``dy``
    normal(0, 1), zero at padded steps; ``dh_n``, ``dc_n`` normal(0, 1) when ``dy`` is drawn
    too, else zeros (a file that gives ``dy`` alone asks for a loss on ``y`` only)."""
    rng = np.random.default_rng([case.seed, 3])
    h_shape, c_shape = state_shapes(case)
    drawn = inputs.dy is None
    B, T = case.batch, case.seq_len

    def draw(shape: tuple[int, ...]) -> np.ndarray:
        return round_to(rng.normal(0.0, 1.0, size=shape), case.dtype)

    dy = inputs.dy
    if dy is None:
        dy = draw((B, T, case.num_directions * case.out_size))
        dy = dy * (np.arange(T)[None, :] < inputs.lengths[:, None])[..., None]
    dh_n = inputs.dh_n if inputs.dh_n is not None else (
        draw(h_shape) if drawn else np.zeros(h_shape))
    dc_n = None
    if case.cell_kind.has_cell_state:
        dc_n = inputs.dc_n if inputs.dc_n is not None else (
            draw(c_shape) if drawn else np.zeros(c_shape))
    return Inputs(inputs.x, inputs.h0, inputs.c0, inputs.seq_lengths, dy, dh_n, dc_n)
