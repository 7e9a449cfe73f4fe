"""Why a GPU pair diverged: rerun it with one thing changed at a time and see which change
brings it within tolerance.

A GPU adapter declares its rerun variants as data (``Adapter.reruns``: (kind, adapter name)
pairs, e.g. ``torch-cudnn-tf32`` -> ``torch-cudnn`` with TF32 off, then ``torch-cpu``). When
its pair is DIVERGED, the runner runs each variant on the same case (each judged by its own
tolerance, as its own pair would be) and :func:`attribute` turns the verdicts into one line
for the summary's reason column and run.json. The kinds are tried in the order of
:data:`KINDS`: the first variant within tolerance names the cause; a divergence that persists
on the CPU build is the adapter's own layout or semantics, not the GPU's arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.compare import DIVERGED, PASS

TF32_OFF = "tf32_off"  # the same GPU adapter with TF32 off
DETERMINISTIC = "deterministic"  # the same GPU adapter with deterministic algorithms
CPU = "cpu"  # the same framework's CPU build

KINDS = (TF32_OFF, DETERMINISTIC, CPU)
LABELS = {TF32_OFF: "TF32 off", DETERMINISTIC: "deterministic algorithms",
          CPU: "the same framework on CPU"}

FOLLOWS = {
    TF32_OFF: "follows TF32: within tolerance with TF32 off",
    DETERMINISTIC: "follows nondeterministic GPU algorithms: within tolerance with "
                   "deterministic algorithms",
    CPU: "follows cuDNN's float32 arithmetic: the CPU build is within tolerance",
}
PERSISTS = "persists on CPU: a layout or semantics mistake"


@dataclass(frozen=True)
class Rerun:
    """One variant to rerun a diverged pair with: its kind (:data:`KINDS`) and adapter."""

    kind: str
    adapter: str

    @property
    def label(self) -> str:
        return LABELS[self.kind]


def reruns(declared: Iterable[tuple[str, str]]) -> list[Rerun]:
    """An adapter's declared (kind, adapter name) pairs as :class:`Rerun`s, in the order of
    :data:`KINDS` (the cheapest explanation first)."""
    out = [Rerun(kind, name) for kind, name in declared]
    unknown = [r.kind for r in out if r.kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown rerun kind(s) {unknown}; known: {list(KINDS)}")
    return sorted(out, key=lambda r: KINDS.index(r.kind))


def attribute(status: str, results: Iterable[tuple[Rerun, str]]) -> str:
    """The attribution text of a pair whose verdict is ``status`` from its reruns' verdicts
    (``pass``, ``DIVERGED``, or anything else: the rerun could not run). Empty unless the pair
    DIVERGED; says which reruns could not run when none decides."""
    if status != DIVERGED:
        return ""
    verdicts = {r.kind: (r, v) for r, v in results}
    for kind in KINDS:
        if kind in verdicts and verdicts[kind][1] == PASS:
            return FOLLOWS[kind]
    if kind_verdict(verdicts, CPU) == DIVERGED:
        return PERSISTS
    missing = [f"{r.label} ({r.adapter}: {v})" for r, v in verdicts.values() if v != DIVERGED]
    if missing:
        return "cause not attributed: could not rerun with " + ", ".join(missing)
    return "cause not attributed: diverges with every rerun variant"


def kind_verdict(verdicts: dict[str, tuple[Rerun, str]], kind: str) -> str | None:
    return verdicts[kind][1] if kind in verdicts else None
