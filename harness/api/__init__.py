"""The harness from Python code (docs/api.md): the public names, stable across releases.

- :func:`check`: run a case (a file, a dict of case keys, a :class:`Case`) through adapters,
  with its weights from a file or straight from a framework object; returns a
  :class:`CheckResult`, truthy when everything passed.
- :func:`make_case`, :func:`case_inputs`: the case a check runs, and the inputs it feeds.
- :func:`expected_outputs`: a framework's own outputs in the harness's order.
- :func:`diagnose`: the layout doctor; returns its :class:`Diagnosis`.
- :func:`compare_models`: each recurrent layer of a shipped model against its original
  (docs/compare.md); returns a :class:`ModelComparison`, truthy when they compute the same.
- Result types :class:`CheckResult`, :class:`PairCheck`, :class:`Divergence`; errors
  :class:`HarnessError` (bad input: :class:`CaseError`, :class:`WeightsError`).
"""

from __future__ import annotations

from harness.api.check import case_inputs, check, diagnose, expected_outputs, make_case
from harness.api.results import CheckResult, Divergence, PairCheck
from harness.doctor.findings import Diagnosis
from harness.errors import CaseError, HarnessError, WeightsError
from harness.models import ModelComparison, compare_models
from harness.spec import Case

__all__ = ["Case", "CaseError", "CheckResult", "Diagnosis", "Divergence", "HarnessError",
           "ModelComparison", "PairCheck", "WeightsError", "case_inputs", "check",
           "compare_models", "diagnose", "expected_outputs", "make_case"]
