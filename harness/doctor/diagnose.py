"""The whole diagnosis: which misreading of a weights file reproduces the outputs someone got.

Inputs: a case (sizes, semantics, input data), a weights file read through a CLAIMED layout,
and the outputs the weights really produce: an ``OUT.npz`` (``y``, optionally ``h_n``,
``c_n``), or ``--adapter NAME``, whose framework is then the source of truth: the adapter runs
the same file read as *its own* layout, and the doctor diagnoses how the claimed layout misreads
it. (With the adapter's own layout claimed, the doctor checks the layout description itself.)

1. The claim is run through the float64 reference and its per-timestep divergence is explained
   (docs/layouts.md, "Reading a divergence signature").
2. The plausible mistakes (:mod:`harness.mistakes`), each a transformation of the claimed
   reading, are searched, pruned by the signature: mistakes that cannot act at t=0 (the
   recurrent side from a zero state, a forget offset from c0 = 0) are set aside while the
   first step is wrong; the first step is run alone (one step from the initial state, cheap)
   to find the input-side hypotheses that make it exact, gate orders included; the recurrent
   side is then searched on the full sequence. Before that, in a stack of several layers or
   directions, the mistakes confined to one layer and direction are searched layer by layer
   (:mod:`harness.doctor.local`): each layer's final states (h_n, c_n) depend only on it and
   the layers below, so layer 0 is fixed direction by direction first, then layer 1 on what
   the fixed layer 0 gives it, and so on. With only y the lower layers cannot be judged alone
   (the same module says what is searched instead).
3. The transformation that reproduces the expected outputs is reported as a mapping table
   (claimed vs actual content of every slice) and as corrected weights in the claimed layout.
"""

from __future__ import annotations

import time

import numpy as np

from harness import reference
from harness.compare import Tolerance, tolerance_for
from harness.data import Inputs
from harness.doctor.explain import explain
from harness.doctor.findings import NEAR_MISS, Diagnosis
from harness.doctor.fit import fit_missing_bias
from harness.doctor.mapping import corrected_mapping
from harness.doctor.search import Doctor
from harness.layouts.base import Layout
from harness.params import Canonical
from harness.spec import Case


def diagnose(case: Case, layout: Layout, native: dict[str, np.ndarray], inputs: Inputs,
             expected: dict[str, np.ndarray], *, source: str = "expected outputs",
             tol: Tolerance | None = None, budget_s: float = 60.0) -> Diagnosis:
    """Explain the claim's signature, search the mistakes, build the fix (not written)."""
    start = time.perf_counter()
    doctor = Doctor(case, layout, native, inputs, expected, tol or tolerance_for(case, "expected"))
    claim = doctor.evaluate(())
    found, closest = doctor.search(budget_s=budget_s)
    if not found:  # no transformation of the file: a bias half it lacks, fitted to the outputs
        fitted = fit_missing_bias(doctor, budget_s=min(budget_s, 30.0))
        if fitted is not None:
            found, closest = [fitted], []
    closest = [f for f in closest if f.score.worst <= NEAR_MISS]
    dx = Diagnosis(case=case, layout=layout, source=source, claim=claim,
                   signature=explain(case, inputs, claim, expected), found=found,
                   closest=closest, noops=_unique(doctor.catalogue.noops), local=doctor.local)
    best = dx.best
    if best is not None and best.hypothesis and all(m.family != "data" for m in best.hypothesis):
        tr = doctor.trial(best.hypothesis)
        dx.fixed_case = tr.case
        dx.fixed = layout.to_native(Canonical(tr.canonical), tr.case)
        back = layout.from_native(dx.fixed, tr.case)
        check = reference.run(tr.case, back, inputs).named()
        dx.fixed_error = max(float(np.abs(check[k] - v).max()) for k, v in expected.items())
        dx.mapping = corrected_mapping(doctor, best.hypothesis)
    dx.evaluated = doctor.budget.evaluated
    dx.stopped = doctor.budget.stopped
    dx.seconds = time.perf_counter() - start
    return dx


def _unique(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen, out = set(), []
    for text, why in items:
        if why not in seen:
            seen.add(why)
            out.append((text, why))
    return out
