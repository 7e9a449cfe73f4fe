"""A ``.tflite`` tensor's values as real numbers and back, from the LiteRT interpreter's
tensor details: pure NumPy, used where the harness runs a shipped ``.tflite``
(:mod:`harness.frameworks.litert_run`) and pasted into a differing pairing's reproducer
(:func:`source`, :mod:`harness.models.tflite_repro`), so that the script reads the file by the
very code the outputs verdict read it with.
"""

from __future__ import annotations

from pathlib import Path

MARKER = "# --- a .tflite tensor's values (pasted into repro.py) ---"


def source() -> str:
    """The text pasted into a script: everything below :data:`MARKER`."""
    text = Path(__file__).read_text(encoding="utf-8")
    return text[text.index(MARKER, text.index(MARKER) + 1):]


# --- a .tflite tensor's values (pasted into repro.py) ---
import numpy as np  # noqa: E402


def to_file(detail, x):
    """``x`` as the tensor of ``detail`` holds it: quantized on its grid where it is integer."""
    kind = np.dtype(detail["dtype"])
    if not np.issubdtype(kind, np.integer):
        return np.ascontiguousarray(x, dtype=kind)
    scale, zero = detail["quantization"]
    info = np.iinfo(kind)
    q = np.clip(np.rint(np.asarray(x, dtype=np.float64) / scale) + zero, info.min, info.max)
    return np.ascontiguousarray(q, dtype=kind)


def from_file(detail, value):
    """A tensor's values as real numbers: dequantized on its grid where it is integer."""
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.integer):
        return value.astype(np.float64)
    scale, zero = detail["quantization"]
    return (value.astype(np.float64) - zero) * scale


def weight_grid(detail, value):
    """A constant tensor's values as real numbers and its grid, per element: (values, scale,
    zero point, the integer range's top); scale None for a float tensor. Per-channel grids
    (``quantized_dimension``) broadcast along their axis."""
    value = np.asarray(value)
    q = detail.get("quantization_parameters") or {}
    scales = np.asarray(q.get("scales", []), dtype=np.float64)
    if not np.issubdtype(value.dtype, np.integer) or scales.size == 0:
        return value.astype(np.float64), None, None, None
    zeros = np.asarray(q.get("zero_points", []), dtype=np.float64)
    zeros = zeros if zeros.size == scales.size else np.zeros_like(scales)
    if scales.size > 1:
        shape = [1] * value.ndim
        shape[int(q.get("quantized_dimension", 0))] = -1
        scales, zeros = scales.reshape(shape), zeros.reshape(shape)
    scale = np.broadcast_to(scales, value.shape)
    zero = np.broadcast_to(zeros, value.shape)
    return ((value.astype(np.float64) - zero) * scale, scale, zero,
            int(np.iinfo(value.dtype).max))
