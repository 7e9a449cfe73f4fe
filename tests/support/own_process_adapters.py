"""Adapters with ``own_process`` for tests/run/test_isolation_own_process.py, in a module of their
own: the worker process imports an adapter by module name. Each computes the float64
reference and reports the process it ran in and the environment it saw there."""

from __future__ import annotations

import os
import time

import numpy as np

from harness import reference
from harness.adapters.base import Adapter
from harness.adapters.reference import EVERYTHING
from harness.data import Inputs, Outputs
from harness.errors import Unavailable
from harness.params import Canonical
from harness.spec import Case

VARIABLE = "RNN_HARNESS_OWN_PROCESS_TEST"


class OwnProcess(Adapter):
    name = "own-process-test"
    title = "the reference, in a worker process of its own"
    framework = "reference"
    capabilities = EVERYTHING
    own_process = {VARIABLE: "set in the worker"}

    def check_available(self) -> None:
        if os.environ.get(VARIABLE) != "set in the worker":
            raise Unavailable(f"{VARIABLE} is not set: not the adapter's own process")

    def versions(self) -> dict[str, str]:
        return {"pid": str(os.getpid()), "keras_home": os.environ.get("KERAS_HOME", "")}

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        if case.name == "crash":
            os._exit(3)
        if case.name == "hang":
            time.sleep(60)
        out = reference.run(case, Canonical(native), inputs)
        out.extras["pid"] = np.array(os.getpid())
        return out
