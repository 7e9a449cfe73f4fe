"""What a run found: one :class:`PairResult` per case x adapter pair, and the
:class:`RunResult` that holds them with the run's own facts. Data only: the run core
(:mod:`harness.runner`) fills them, the reports and the progress display read them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from harness import compare, judges
from harness.adapters import Adapter
from harness.blind import BlindCheck
from harness.data import Outputs
from harness.handed import Handed
from harness.judges.verdict import Figures, Verdict
from harness.repro.record import ReproRecord
from harness.spec import Case


@dataclass
class PairResult:
    case: str
    adapter: str
    status: str  # pass | DIVERGED | not applicable | unavailable | error | baseline
    reason: str = ""
    seconds: float = 0.0
    rows: pd.DataFrame | None = None  # the divergence rows (harness.judges.columns)
    outputs: Outputs | None = None
    detail: str = ""  # traceback of an error, for errors.log
    attribution: str = ""  # a DIVERGED GPU pair: what its reruns say caused it (attribution.py)
    # the adapter's availability, versions and precision flags, taken in the process it ran in
    # (Adapter.environment); gathered into RunResult.environments for run.json
    environment: dict | None = None
    # what the adapter handed its framework (Outputs.handed), until the run makes the pair's
    # reproducer record from it (harness/repro/record.py) and drops it
    handed: Handed | None = None
    repro: ReproRecord | None = None  # a DIVERGED, error or known-bug pair's (run --no-repro: none)
    # what its judge said (harness.judges): the status, reason and rows above are its, with
    # its figures and known-bug decision, which run.json keeps for merge; None: not judged
    verdict: Verdict | None = None

    @property
    def has_rows(self) -> bool:
        return self.rows is not None and not self.rows.empty

    @property
    def figures(self) -> Figures:
        """What the pair's judge measured beyond the rows (none where it was not judged)."""
        return self.verdict.figures if self.verdict is not None else Figures()

    @property
    def worst(self) -> pd.Series | None:
        """The free-running row furthest beyond (or closest to) its tolerance."""
        return compare.worst(compare.of_mode(self.rows, compare.FREE))

    @property
    def first_diverging(self) -> pd.Series | None:
        """The first row beyond tolerance, free-running rows first
        (:func:`harness.compare.first_divergence`)."""
        return compare.first_divergence(self.rows)

    @property
    def step_rows(self) -> pd.DataFrame | None:
        """The step-local rows (:mod:`harness.steplocal`); None or empty when not run."""
        return compare.of_mode(self.rows, compare.STEP)


@dataclass
class RunResult:
    cases: list[Case]
    adapters: list[Adapter]
    pairs: list[PairResult] = field(default_factory=list)
    prepare_seconds: dict[str, float] = field(default_factory=dict)
    case_errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    jobs: int = 1  # worker processes that ran the cases (``run --jobs``)
    shard: str | None = None  # "K/N" when this run is one shard of a larger one (harness.shard)
    shard_of: dict | None = None  # the whole run a shard is part of: its "cases" and "adapters"
    blind: dict[str, BlindCheck] = field(default_factory=dict)  # per case name
    environments: dict[str, dict] = field(default_factory=dict)  # adapter -> where it ran
    # the host and GPU memory limits the cases were held to (MemoryLimit.record), for run.json;
    # None when the run was given a plain byte count or none
    memory_limits: dict | None = None
    # named-only adapters (Adapter.named_only) the default selection left out: name -> why
    left_out: dict[str, str] = field(default_factory=dict)

    @property
    def divergence(self) -> pd.DataFrame:
        """Every pair's rows in one DataFrame, divergence.csv's columns
        (:func:`harness.judges.columns`)."""
        frames = [p.rows for p in self.pairs if p.has_rows]
        if not frames:
            return pd.DataFrame(columns=judges.columns())
        return judges.ordered(pd.concat(frames, ignore_index=True))

    def passes_by_construction(self, pair: PairResult) -> bool:
        """A pair of the noise-floor reference (``Adapter.is_the_noise_floor``) judged by the
        noise floor: its error is the floor itself (floor ratio 1), and in a float64 case the
        floor is the reference (error 0). It could not have failed, and tested no framework."""
        adapter = next((a for a in self.adapters if a.name == pair.adapter), None)
        case = next((c for c in self.cases if c.name == pair.case), None)
        if adapter is None or case is None or not adapter.is_the_noise_floor:
            return False
        tol = compare.tolerance_for(case, adapter.name, adapter.tolerances)
        return case.dtype == "float64" or tol.floor_factor is not None

    @property
    def compared_no_framework(self) -> bool:
        """Pairs compared, but every one of them passes by construction
        (:meth:`passes_by_construction`, e.g. ``--adapters reference,noise-floor``): no framework
        was tested, the run is vacuous."""
        if self.shard is not None:  # a part of a run: the whole run (merged) is judged
            return False
        compared = [p for p in self.pairs if p.status in compare.COMPARED]
        return bool(compared) and all(self.passes_by_construction(p) for p in compared)

    @property
    def failed(self) -> bool:
        return bool(self.case_errors) or any(
            p.status in (compare.DIVERGED, compare.ERROR, compare.LOOKS_FIXED)
            for p in self.pairs)
