"""A planted layout mistake for tests: torch-cpu reading its weights with the f and g gate
blocks of one fused tensor swapped (i g f o instead of i f g o), as a real adapter would run
a wrong mapping: the harness itself is not changed."""

from __future__ import annotations

import dataclasses


def planted_torch(kind: str):
    """torch-cpu with the f and g blocks of ``kind`` swapped: ``W`` (weight_ih) or ``R``
    (weight_hh)."""
    from harness.adapters.torch_cpu import TorchCPU
    from harness.layouts import torch as torch_layout
    from harness.layouts.base import fused

    name = {"W": "weight_ih", "R": "weight_hh"}[kind]

    def describe(case, layer, d):
        return [fused(case, layer, d, t.name, kind, "igfo", axis=0)
                if t.name.startswith(name) else t for t in torch_layout.describe(case, layer, d)]

    layout = dataclasses.replace(torch_layout.TORCH, name=f"torch-planted-{kind}",
                                 describe=describe)

    class Planted(TorchCPU):
        name = f"torch-planted-{kind}"

        @property
        def layout(self):
            return layout

    return Planted()
