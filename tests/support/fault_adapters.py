"""Adapters that fail on purpose, and two small cases to run them on, for
``tests/run/test_adapter_faults.py`` and ``tests/run/test_killed_runs.py``.

They live in a module of their own (not in the test file) because ``--isolate`` pickles an
adapter by reference to its class and a spawned worker process imports it by module name.
Each computes the right answer with the float64 reference, then breaks it in one way.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import numpy as np

from harness import reference
from harness.adapters.base import Adapter
from harness.adapters.reference import EVERYTHING
from harness.data import Inputs, Outputs
from harness.errors import KnownUpstreamCrash, Unavailable
from harness.params import Canonical
from harness.spec import Case

CASES = [
    Case(name="first", cell="lstm", input_size=2, hidden_size=3, batch=2, seq_len=3),
    Case(name="second", cell="gru", input_size=3, hidden_size=2, batch=2, seq_len=4,
         seq_lengths=[4, 2], bidirectional=True),
]


class Correct(Adapter):
    """The reference under another name; records the process it ran in (``extras["pid"]``)."""

    name = "fault-none"
    title = "a correct adapter"
    framework = "reference"
    capabilities = EVERYTHING

    def _run(self, case: Case, native: dict[str, np.ndarray], inputs: Inputs) -> Outputs:
        out = reference.run(case, Canonical(native), inputs)
        out.extras["pid"] = np.array(os.getpid())
        return out


class Raises(Correct):
    name = "fault-raises"

    def _run(self, case, native, inputs):
        raise RuntimeError(f"planted failure on {case.name}")


class CrashesAsKnown(Correct):
    """A framework crash the adapter declares as an open upstream bug (as the quantized LiteRT
    adapters declare the converter's SIGSEGV)."""

    name = "fault-known-crash"

    def _run(self, case, native, inputs):
        raise KnownUpstreamCrash("the converter's process died with SIGSEGV", "org/repo#1")


class ReturnsNaN(Correct):
    name = "fault-nan"

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.y[0, -1, 0] = np.nan
        return out


class ReturnsNaNBesideLayers(Correct):
    """NaN in ``y`` only, while ``y_layers`` (what the divergence reads) stay finite: a
    framework whose ``y`` is a copy of its last layer's (Keras)."""

    name = "fault-nan-unread"

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.y = out.y.copy()
        out.y[-1, 0, -1] = np.nan
        return out


class ReturnsInf(Correct):
    name = "fault-inf"

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.h_n[...] = np.inf
        return out


class WrongShape(Correct):
    """Time-major y, the classic batch_first mix-up."""

    name = "fault-shape"

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.y = out.y.transpose(1, 0, 2).copy()
        return out


class Sleeps(Correct):
    name = "fault-sleeps"

    def _run(self, case, native, inputs):
        time.sleep(3600)
        raise AssertionError("unreachable")


class Exits(Correct):
    name = "fault-exits"

    def _run(self, case, native, inputs):
        os._exit(3)


class KillsItself(Correct):
    name = "fault-sigkill"

    def _run(self, case, native, inputs):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)


class Segfaults(Correct):
    name = "fault-segfault"

    def _run(self, case, native, inputs):
        ctypes.string_at(0)  # reads address 0: SIGSEGV


class CrashesOnFirstCase(Correct):
    """Dies on the case named ``boom``, works on the others: the worker must be restarted."""

    name = "fault-crash-once"

    def _run(self, case, native, inputs):
        if case.name == "boom":
            os._exit(1)
        return super()._run(case, native, inputs)


class NotInstalled(Correct):
    name = "fault-unavailable"

    def check_available(self) -> None:
        raise Unavailable("fakeframework is not installed (planted)")


class Silent(Correct):
    """Prints nothing and returns nothing useful: no c_n for an LSTM."""

    name = "fault-no-cn"

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.c_n = None
        return out


class Offset(Correct):
    """The reference's h_n plus ``offset``: within tolerance when the offset is tiny, DIVERGED
    when not (for ``test_attribution.py``: GPU adapters and their rerun variants)."""

    name = "fault-offset"
    offset = 1e-2

    def _run(self, case, native, inputs):
        out = super()._run(case, native, inputs)
        out.h_n = out.h_n + self.offset
        return out


class TellsItsProcess(Correct):
    """Its versions and precision flags say which process took them (test_environment.py)."""

    name = "tells-its-process"

    def versions(self) -> dict[str, str]:
        return {"tells-its-process": str(os.getpid())}

    def precision_flags(self) -> dict[str, object]:
        return {"tells-its-process.pid": os.getpid()}
