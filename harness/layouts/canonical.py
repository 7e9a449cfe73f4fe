"""The ``canonical`` layout: one native tensor per canonical block, named by its own key."""

from __future__ import annotations

from harness.layouts.base import Layout, NativeTensor, Placement
from harness.params import block_shapes, key
from harness.spec import Case


def describe(case: Case, layer: int, d: int) -> list[NativeTensor]:
    return [
        NativeTensor(key(layer, d, name), shape,
                     (Placement((...,), (key(layer, d, name),), where="[...]"),))
        for name, shape in block_shapes(case, layer).items()
    ]


CANONICAL = Layout(
    name="canonical",
    title="Canonical blocks (layer{k}/{forward|backward}/NAME)",
    cells=("lstm", "gru"),
    describe=describe,
)
