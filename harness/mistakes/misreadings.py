"""The plausible ways to misread a weights file, as transformations of the claimed reading.

A weights file is read through a *claimed* layout (``Layout.from_native``) into canonical
parameters. Each :class:`Mistake` says how the framework that produced the outputs really read
the same file, as a transformation of that reading:

- ``reshape``   a native tensor filled with ``x.reshape`` where ``x.T`` belonged, or the reverse
                (docs/layouts.md, Reading a divergence signature P2), applied to the native tensor
                before reading;
- ``reading``   every gate block of one kind (W, R, Wp) read from its slice another way:
                as stored, transposed, or a C-/F-order reshape (P1, P2b: cuDNN buffers);
- ``order``     the gate blocks of one kind (W, R, biases, peepholes) or of all of them are in
                another of the 24 LSTM / 6 GRU orders (P3, P7, P10b);
- ``bias``      a dropped input or recurrent bias, biases counted twice or half (P5), GRU
                ``bR_n`` summed into ``bW_n`` (split vs summed bias); a bias half missing from
                the file (:func:`missing_bias_half`: a Keras bias set from torch's ``bias_ih``
                alone), whose values only the outputs can give (fitted by the doctor);
- ``forget``    a forget-gate offset of ±1 (or ±forget_bias) added at run time by one side (P4);
- ``swap``      input and recurrent kernels swapped; forward and backward directions swapped;
- ``variant``   GRU reset_after flipped (P6), the update gate inverted (P8), another recurrent
                activation (P12): the case, not the weights, is what differs;
- ``data``      batch-major input read as time-major, (h0, c0) swapped (P11).

Each mistake acts on every layer and direction alike. In a real file a mistake is often in one
tensor of one layer: :mod:`.local` confines the weight mistakes (every family but ``variant``
and ``data``) to one layer and direction, and adds the swap of one layer's two directions; the
doctor searches them layer by layer.

A mistake and the trial it edits are :mod:`.mistake`; the families are built in
:mod:`.reading_families` (reshape, reading, order), :mod:`.value_families` (bias, forget, swap)
and :mod:`.case_families` (variant, data). Transformations are built from index maps computed
on the claimed layout's own description, so a mistake that is a no-op at a case's sizes (a
transpose of a [1, 1] block, a reshape of a [H, 1] slice) is recognised as such: the case
cannot tell it from the claim (:attr:`noops`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.layouts.base import Layout, Placement
from harness.mistakes.case_families import data_mistakes, variants
from harness.mistakes.mistake import Mistake
from harness.mistakes.reading_families import orders, readings, reshapes
from harness.mistakes.value_families import biases, swaps
from harness.params import block_shapes, key, layer_dirs
from harness.spec import Case


@dataclass
class Catalogue:
    """Every single mistake for a case read through a claimed layout, plus the ones that are
    no-ops at the case's sizes (``noops``: (text, why)) and the ones that cannot happen at all
    (``impossible``: a swap of differently shaped tensors)."""

    mistakes: list[Mistake]
    noops: list[tuple[str, str]]
    impossible: list[tuple[str, str]] = field(default_factory=list)


def catalogue(case: Case, layout: Layout) -> Catalogue:
    """The single mistakes for ``case`` read through ``layout`` (structure only: no values)."""
    tensors = layout.tensors(case)
    shape_of = {t.name: t.shape for t in tensors}
    # canonical key -> (tensor, placement) holding it (first source of a placement)
    home: dict[str, tuple[str, Placement]] = {}
    for t in tensors:
        for pl in t.placements:
            home.setdefault(pl.sources[0], (t.name, pl))
    shapes = {key(la, d, n): s for la, d in layer_dirs(case)
              for n, s in block_shapes(case, la).items()}
    mistakes: list[Mistake] = []
    noops: list[tuple[str, str]] = []

    mistakes += reshapes(case, tensors, noops)
    mistakes += readings(case, home, shape_of, shapes, noops)
    mistakes += orders(case, tensors)
    mistakes += biases(case)
    impossible: list[tuple[str, str]] = []
    mistakes += swaps(case, impossible)
    mistakes += variants(case)
    mistakes += data_mistakes(case, noops)
    return Catalogue(mistakes, noops, impossible)
