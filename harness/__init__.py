"""rnn-harness: cross-framework numerical conformance for LSTM and GRU layers.

The public Python API (docs/api.md) is the names in ``__all__``, defined in :mod:`harness.api`
and loaded on first use, so that ``import harness`` stays cheap for the command line. Importing
this package never imports a deep-learning framework: adapters import theirs lazily.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from harness.version import __version__

# the final line's "s in all": the run's wall time on one monotonic clock
# (harness/cli/run.py, _process_seconds)
IMPORTED_AT = time.monotonic()

# TensorFlow prints start-up chatter to stderr (oneDNN, CUDA stubs, cuInit errors) unless told
# otherwise; the harness's own stderr is for progress and one-line errors. 3 hides E lines too
# (2 does not). This covers TensorFlow imported other than by the harness (a user's conftest);
# frameworks/tf.py's import_tf sets 3 whatever the user set, and silences fd 2 around the import.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

__all__ = ["Case", "CaseError", "CheckResult", "Diagnosis", "Divergence", "HarnessError",
           "ModelComparison", "PairCheck", "WeightsError", "__version__", "case_inputs", "check",
           "compare_models", "diagnose", "expected_outputs", "make_case"]

if TYPE_CHECKING:
    from harness.api import (
        Case,
        CaseError,
        CheckResult,
        Diagnosis,
        Divergence,
        HarnessError,
        ModelComparison,
        PairCheck,
        WeightsError,
        case_inputs,
        check,
        compare_models,
        diagnose,
        expected_outputs,
        make_case,
    )


def __getattr__(name: str) -> Any:
    # the public API on first use (PEP 562): importing it imports the run, pandas, pydantic
    if name in __all__:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
