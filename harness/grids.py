"""Integer grids, and what a quantized model declares on them: the weights as stored and the
grids of each layer's input, hidden and cell state and of its output (:class:`QuantizedModel`),
or how a dynamic kernel quantizes its activations at run time (:class:`DynamicActivation`).

Data only, NumPy only: the readers of converted models (:mod:`harness.frameworks.litert_flatbuffer`)
write them below the yardstick that judges a quantized pair (:mod:`harness.quantization`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Grid:
    """An integer grid: value = (q − zero_point) x scale, q in [qmin, qmax]."""

    scale: float
    zero_point: int
    qmin: int
    qmax: int

    def round(self, a: np.ndarray) -> np.ndarray:
        q = np.clip(np.rint(a / self.scale) + self.zero_point, self.qmin, self.qmax)
        return (q - self.zero_point) * self.scale


@dataclass(frozen=True)
class DynamicActivation:
    """How a dynamic-quantization kernel quantizes the activation operand ``a`` of a product
    ``a @ Wᵀ`` at run time, from ``a``'s own range (docs/quantization.md, "Dynamic
    quantization"). The reference's products are the layer's input over all steps at once
    (``x @ Wᵀ``) and the hidden state once per step (``h @ Rᵀ``), each one call.

    - ``rows``: the rows of ``a`` that share one range: None, the whole operand (per tensor);
      1, each row its own (per row);
    - ``qmin``..``qmax``: the integer range, e.g. uint8 0..255, or 0..127 where the kernel
      keeps a bit free (``reduce_range``) so that the int16 sums of u8 x s8 pairs cannot
      saturate;
    - ``symmetric``: scale max|a| / qmax, zero point 0; else affine: the range with 0 in it,
      scale (max − min) / (qmax − qmin) in float32, zero point qmin − min / scale rounded to
      the nearest integer (ties to even) and clamped to qmin..qmax; each value a / scale
      rounded ties to even (ONNX Runtime's ``DynamicQuantizeLinear``);
    - ``tflite``: TFLite's ``tensor_utils`` arithmetic instead (its hybrid kernels'
      ``SymmetricQuantizeFloats`` and ``AsymmetricQuantizeFloats``, on ``a`` in float32): the
      affine scale computed in float64, then stored in float32; the zero point from the
      minimum or from the maximum, whichever carries the smaller error, rounded half away from
      zero; each value multiplied by the scale's float32 inverse (symmetric: qmax / max|a|),
      the zero point added, rounded half away from zero.

    The product then is exact integer arithmetic times the two scales: the reference computes
    it in float64 from ``a`` on its grid and the weights as stored, dequantized."""

    qmin: int = 0
    qmax: int = 255
    symmetric: bool = False
    rows: int | None = None
    tflite: bool = False

    def extent(self, block: np.ndarray) -> tuple[float, float]:
        """(min, max) of one block of rows: the range its grid covers."""
        return float(block.min()), float(block.max())

    def grid(self, lo: float, hi: float) -> Grid:
        """The grid of one block with values in [lo, hi]."""
        if self.tflite and not self.symmetric:
            return self._tflite_affine(lo, hi)
        if self.symmetric:
            bound = max(abs(lo), abs(hi))
            scale = float(np.float32(bound) / np.float32(self.qmax)) or 1.0
            return Grid(scale, 0, self.qmin, self.qmax)
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = float((np.float32(hi) - np.float32(lo)) / np.float32(self.qmax - self.qmin)) \
            or 1.0  # an all-zero operand: any scale gives 0 (ORT takes 1)
        zero = int(np.rint(np.clip(self.qmin - lo / scale, self.qmin, self.qmax)))
        return Grid(scale, zero, self.qmin, self.qmax)

    def _tflite_affine(self, lo: float, hi: float) -> Grid:
        """``AsymmetricQuantizeFloats``' grid: its arithmetic in float64 from the float32
        range, the scale kept in float32."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if lo == hi:
            return Grid(1.0, 0, self.qmin, self.qmax)
        scale = (hi - lo) / (self.qmax - self.qmin)
        from_min, from_max = self.qmin - lo / scale, self.qmax - hi / scale
        exact = (from_min if abs(self.qmin) + abs(lo / scale) < abs(self.qmax) + abs(hi / scale)
                 else from_max)
        zero = (self.qmin if exact <= self.qmin else self.qmax if exact >= self.qmax
                else int(_half_away(np.float64(exact))))
        return Grid(float(np.float32(scale)), zero, self.qmin, self.qmax)

    def _tflite_round(self, block: np.ndarray) -> np.ndarray:
        """``block`` as TFLite's hybrid kernel quantizes it (class text, ``tflite``)."""
        a = block.astype(np.float32)
        lo, hi = self.extent(a)
        g = self.grid(lo, hi)
        if self.symmetric:
            bound = np.float32(max(abs(lo), abs(hi)))
            if bound == 0:
                return np.zeros(block.shape)
            inverse = np.float32(self.qmax) / bound
        else:
            inverse = np.float32(1.0 / g.scale)
        q = np.clip(_half_away(np.float32(g.zero_point) + a * inverse), self.qmin, self.qmax)
        return (q - g.zero_point) * g.scale

    def round(self, a: np.ndarray) -> np.ndarray:
        """``a`` [rows, K] as the kernel reads it: each block of rows on its own grid."""
        n = a.shape[0] if self.rows is None else self.rows
        if self.tflite:
            return np.concatenate([self._tflite_round(a[r:r + n])
                                   for r in range(0, a.shape[0], n)])
        return np.concatenate([self.grid(*self.extent(a[r:r + n])).round(a[r:r + n])
                               for r in range(0, a.shape[0], n)])

    def describe(self) -> str:
        kind = "symmetric" if self.symmetric else "affine"
        per = "per tensor" if self.rows is None else (
            "per row" if self.rows == 1 else f"per {self.rows} rows")
        how = ", TFLite's rounding" if self.tflite else ""
        return (f"activations {kind} {self.qmin}..{self.qmax} {per}, from their run-time "
                f"range{how}")


def _half_away(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to the nearest integer, ties away from zero (C's ``round``), in float64:
    a float32 ``a`` and the half added are exact there."""
    a = np.asarray(a, dtype=np.float64)
    return np.copysign(np.floor(np.abs(a) + 0.5), a)


@dataclass(frozen=True)
class LayerGrids:
    """The grids of one layer and direction: its input ``x``, hidden state ``h``, cell state
    ``c`` (None: not quantized, as activations of a dynamic-range model)."""

    x: Grid | None = None
    h: Grid | None = None
    c: Grid | None = None


@dataclass
class QuantizedModel:
    """What a quantized adapter read from its converted model: its ``scheme`` (int8, dynamic),
    the weights as stored (dequantized, canonical keys), the grids per layer and direction
    (``"layer/direction"`` keys) and of the model's output ``y`` (None: float output), and the
    ops that ran."""

    scheme: str
    weights: dict[str, np.ndarray]
    grids: dict[str, LayerGrids] = field(default_factory=dict)
    output: Grid | None = None
    # a dynamic kernel's run-time quantization of each product's activation operand (None:
    # the products read float activations, as the model stores none of their grids)
    activations: DynamicActivation | None = None
    # the weights' integer range, ±weight_qmax: 127 for int8; a kernel that keeps a bit free
    # (ONNX Runtime's reduce_range) stores 7-bit weights, ±64, and its ideal does too
    weight_qmax: int = 127
