"""What the weights judge (:mod:`harness.models.judges.weights`) measures of a pairing: the shipped
layer's canonical parameters against the original's, block by block, as multiples of the
rounding of the format they were stored in (:func:`block_ratios`), the case fields by which
they compute differently (:func:`semantics`), how far apart two layers' weights are whatever
their order (:func:`distance`, for pairing), and the doctor's diagnosis (:func:`diagnose`).

Two values agree when ``|a - b| <= eps · scale`` (compared in float64), ``eps`` the machine
epsilon of the coarser of the two layers' stored formats (float32: 1.2e-7; float16: 9.8e-4;
bfloat16: 7.8e-3) and ``scale`` the tensor's largest magnitude in either layer: a port that
rounds float64 weights to float32 agrees, a swapped gate block (a difference of the order of
the weights themselves) does not.

The doctor (:func:`harness.doctor.diagnose`) is given what a user would otherwise build by
hand: the expected outputs are the float64 reference on the ORIGINAL's weights, on the case's
generated inputs, and the claimed reading is the SHIPPED layer's tensors in its own layout.
"""

from __future__ import annotations

import numpy as np

from harness.doctor.findings import Diagnosis
from harness.dtypes import FORMATS
from harness.models.layers import STORED_FORMATS, Layer

# case fields that change what a layer computes, beside its sizes: compared one by one
SEMANTICS = ("dir_mode", "reset_after", "recurrent_activation", "input_forget", "peepholes",
             "gate_clip", "cell_clip", "proj_clip", "forget_bias")
DOCTOR_BUDGET_S = 30.0


def rounding(a: Layer, b: Layer) -> float:
    """Machine epsilon of the coarser of the two layers' stored formats."""
    return float(FORMATS[stored_format(a, b)].eps)


def grids_of(original: Layer, shipped: Layer) -> dict:
    """The grids of the quantized blocks (``forward/W_f`` -> a ``.tflite``'s
    :class:`~harness.readers.tflite.WeightGrid`): the shipped layer's, else the original's;
    empty where neither layer is quantized."""
    for layer in (shipped, original):
        grids = getattr(getattr(layer, "tflite", None), "grids", None)
        if grids:
            return grids
    return {}


def block_ratios(original: Layer, shipped: Layer) -> dict[str, float]:
    """Per canonical block (``forward/W_r``): its largest difference as a multiple of the
    rounding allowed (0: equal; above 1: differs). A quantized block is allowed half a step
    of its own grid per element (``scale / 2``), beside float64's rounding of the scale."""
    eps = rounding(original, shipped)
    grids = grids_of(original, shipped)
    out = {}
    mine, theirs = compared_tensors(original, shipped), compared_tensors(shipped, original)
    for k, want in mine.items():
        got = theirs[k]
        scale = max(float(np.abs(want).max(initial=0.0)), float(np.abs(got).max(initial=0.0)))
        grid = grids.get(k.split("/", 1)[1])
        if grid is not None:
            allowed_each = grid.scale / 2 * (1 + 1e-6) + eps * scale
            out[k.split("/", 1)[1]] = float(np.max(np.abs(got - want) / allowed_each,
                                                   initial=0.0))
            continue
        out[k.split("/", 1)[1]] = float_ratio(want, got, eps)
    return out


def float_ratio(want: np.ndarray, got: np.ndarray, eps: float) -> float:
    """A float block's largest difference as a multiple of the rounding allowed: ``eps`` x
    the largest magnitude in either (0: equal; above 1: differs). Pure NumPy: pasted into
    a reproducer's script (:mod:`harness.models.ir_repro`)."""
    scale = max(float(np.abs(want).max(initial=0.0)), float(np.abs(got).max(initial=0.0)))
    diff = float(np.abs(got - want).max(initial=0.0))
    allowed = eps * scale
    return 0.0 if diff == 0 else diff / allowed if allowed > 0 else float("inf")


def biases_summed(layer: Layer) -> bool:
    """The layer's file holds one bias per gate, bW + bR summed (an OpenVINO IR's sequence
    op): its canonical bW holds the sum, bR zeros."""
    return bool(getattr(layer.ir, "biases_summed", False))


def compared_tensors(layer: Layer, other: Layer) -> dict[str, np.ndarray]:
    """``layer``'s canonical blocks as compared with ``other``'s: where either file stores the
    biases summed, each gate's bW + bR in bW and zeros in bR (what such a file can hold),
    except a GRU's n gate with reset_after, whose two biases stay apart."""
    tensors = layer.canonical.tensors
    if not (biases_summed(layer) or biases_summed(other)):
        return tensors
    out = dict(tensors)
    for k in tensors:
        scope, name = k.rsplit("/", 1)
        if not name.startswith("bW_"):
            continue
        gate = name[3:]
        if gate in layer.case.cell_kind.separate_biases(layer.case.reset_after):
            continue
        r = f"{scope}/bR_{gate}"
        if r in tensors:
            out[k] = tensors[k] + tensors[r]
            out[r] = np.zeros_like(tensors[r])
    return out


def quantized_offences(original: Layer, shipped: Layer) -> list[str]:
    """Per quantized block further than half a step from its own grid, in words: the file's
    tensor, the largest offence in steps, and, for a symmetric weight grid, the factor by
    which its scale differs from what the original's values need (``max |w| / qmax``) where
    that factor is not 1 (``scale 1.25x what its values need``)."""
    grids = grids_of(original, shipped)
    out = []
    for k, want in original.canonical.tensors.items():
        block = k.split("/", 1)[1]
        grid = grids.get(block)
        if grid is None:
            continue
        steps = np.abs(shipped.canonical.tensors[k] - want) / grid.scale
        worst = float(np.max(steps, initial=0.0))
        if worst <= 0.5 * (1 + 1e-6) + 1e-9:
            continue
        words = f"{block} ({grid.tensor}): {worst:.3g} steps from the original's values"
        need = float(np.abs(want).max(initial=0.0)) / grid.qmax
        if (block.rsplit("/", 1)[-1][0] in "WR" and not np.any(grid.zero_point) and need > 0
                and np.ptp(grid.scale) == 0):
            factor = float(grid.scale.flat[0]) / need
            if abs(factor - 1) > 0.01:
                words += f"; scale {factor:.3g}x what its values need"
        out.append(words)
    return out


def distance(original: Layer, shipped: Layer) -> float:
    """How far two layers' weights are, whatever the order they hold them in: the largest
    difference of their sorted values, over their scale. A gate order, a transposition or
    swapped directions moves no value: 0 for them, as for the same weights; other weights are
    far."""
    a = np.sort(np.concatenate([t.ravel() for t in original.canonical.tensors.values()]))
    b = np.sort(np.concatenate([t.ravel() for t in shipped.canonical.tensors.values()]))
    if a.shape != b.shape:
        return float("inf")
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-300)
    return float(np.abs(a - b).max(initial=0.0)) / scale


def agree(original: Layer, shipped: Layer) -> bool:
    """Same semantics, and every block within rounding."""
    return not semantics(original, shipped) and all(
        r <= 1.0 for r in block_ratios(original, shipped).values())


def semantics(original: Layer, shipped: Layer) -> list[str]:
    """The case fields by which the two layers compute differently (``reset_after: original
    true, shipped false``)."""
    out = []
    for name in SEMANTICS:
        a, b = getattr(original.case, name), getattr(shipped.case, name)
        if a != b:
            def say(v: object) -> str:
                return str(v).lower() if isinstance(v, bool) or v is None else str(v)

            out.append(f"{name}: original {say(a)}, shipped {say(b)}")
    return out


def stored_format(original: Layer, shipped: Layer) -> str:
    """The coarser of the two layers' stored formats (``float32``)."""
    coarser = min(STORED_FORMATS.index(original.dtype), STORED_FORMATS.index(shipped.dtype))
    return STORED_FORMATS[coarser]


def diagnose(original: Layer, shipped: Layer, budget_s: float) -> Diagnosis:
    """The doctor on the shipped layer's tensors as its layout reads them, against the float64
    reference on the original's weights (its semantics) on the case's generated inputs."""
    from harness import reference
    from harness.compare import tolerance_for
    from harness.data import generate
    from harness.doctor import diagnose as search
    from harness.layouts import get_layout

    inputs = generate(original.case)
    expected = reference.run(original.case, original.canonical, inputs).named()
    return search(shipped.case, get_layout(shipped.layout), shipped.native, inputs, expected,
                    source="the float64 reference on the original's weights",
                    tol=tolerance_for(shipped.case, "expected"), budget_s=budget_s)
