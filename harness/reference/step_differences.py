"""How an integer kernel's tensor differs from the integer reference's, step by step: what the
interpreter's tensors (harness/reference/litert_int8_exact.py) and a judged pair's output
(harness/judges/bit_exact.py) report. No imports: the judges read it without a framework."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepDifferences:
    """How a tensor's values differ from the integer reference's, step by step: ``differing[t]``
    of the ``per_step`` values at step ``t``, and the largest difference in integer steps of
    its grid (0: bit-exact)."""

    differing: tuple[int, ...]
    per_step: int
    max_steps: int

    @property
    def exact(self) -> bool:
        return not any(self.differing)

    def counted(self) -> str:
        """``3 of 512 values differ``."""
        return f"{sum(self.differing)} of {self.per_step * len(self.differing)} values differ"

    def steps(self) -> str:
        """``t=4: 1, t=5: 2``: the steps where values differ, with how many."""
        return ", ".join(f"t={t}: {n}" for t, n in enumerate(self.differing) if n)
