"""Each framework family's code that its adapters run and its reproducers paste: one copy.

A reproducer script (harness/repro/render.py) runs the framework as the adapter did. So that
it does so by the adapter's own code, each family's module here holds that code's pure part
below a marker line (functions that take the framework's modules or objects as arguments and
import nothing of the harness): the adapter imports and runs it, the script gets the same
text pasted (``source()``). Above the marker, the module holds what only the script needs: its
framework part (imports, versions, device, ``run_framework`` calling the pasted functions)
and the family's facts (:class:`~harness.families.paste.Family`: what it needs installed, the
call values that choose its text, its trackers).

Layering: this package sits below both ``harness.adapters`` (which imports it) and
``harness.repro`` (which assembles scripts from :data:`FAMILIES`, also for a stored report,
without importing an adapter or a framework); it imports nothing of either.

- :mod:`~harness.families.flax`, :mod:`~harness.families.torch`,
  :mod:`~harness.families.keras` (tf_keras, Keras 3 on TensorFlow, and ``keras3-backend``),
  :mod:`~harness.families.onnx`, :mod:`~harness.families.mlx`,
  :mod:`~harness.families.converted` (``tflite``, ``executorch``, with
  :mod:`~harness.families.readout`).
"""

from __future__ import annotations

from harness.families import converted, flax, keras, mlx, onnx, torch
from harness.families.paste import Family

FAMILIES: dict[str, Family] = {f.name: f for f in (
    flax.FAMILY, onnx.FAMILY, torch.FAMILY, keras.FAMILY, converted.TFLITE,
    converted.EXECUTORCH, mlx.FAMILY, keras.BACKEND_FAMILY)}
"""``Handed.family`` -> its :class:`Family`."""

TRACKERS: dict[str, str] = {k: v for f in FAMILIES.values() for k, v in f.trackers.items()}
"""The issue tracker of each framework a handed call names (``call["framework"]``)."""

TITLE_PREFIX: dict[str, str] = {"tensorflow": "[RNN] "} | {
    k: v for f in FAMILIES.values() for k, v in f.title_prefix.items()}
"""The title prefix each framework's issue form asks for (TensorFlow's RNN issues carry
``[RNN]``)."""

__all__ = ["FAMILIES", "TITLE_PREFIX", "TRACKERS", "Family"]
