"""The capability contract: what an adapter declares (``Capabilities``) it can run. For every
adapter available here and each capability it declares (each cell, direction, dtype, recurrent
activation and GRU reset mode; peepholes, projection, the clips, the coupled input-forget gate,
a forget bias, variable lengths, initial states, stacked layers; gradients), a minimal case
needing that capability runs through the public runner. Pass or DIVERGED is a result; an error
row (a crash, "returned no gradients", a wrong shape) or a not-applicable verdict is a broken
declaration. With ``gradients`` declared every case is a gradient case, and its gradients must
be compared (gradient rows present) unless the adapter says why not (``gradient_reasons``).

One test per adapter, its cases in one run (one framework start-up each); unavailable
adapters are skipped with their reason.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.fault_adapters import Correct

from harness import adapters as registry
from harness import compare, isolation, runner
from harness.adapters.base import Adapter
from harness.spec import Case

TINY: dict[str, Any] = dict(input_size=2, hidden_size=3, batch=2, seq_len=3, seed=5)


def _dtype(adapter: Adapter) -> str:
    caps = adapter.capabilities.dtypes
    return "float32" if "float32" in caps else sorted(caps)[0]


def contract_cases(adapter: Adapter) -> list[tuple[str, Case]]:
    """(what it checks, a minimal case needing it) for every capability the adapter declares."""
    caps = adapter.capabilities
    base = dict(TINY, dtype=_dtype(adapter), gradients=caps.gradients)
    lstm = "lstm" in caps.cells
    wanted: list[tuple[str, dict[str, Any]]] = []
    wanted += [(f"cell={c}", dict(cell=c)) for c in sorted(caps.cells)]
    cell = "lstm" if lstm else sorted(caps.cells)[0]
    wanted += [(f"dtype={d}", dict(cell=cell, dtype=d)) for d in sorted(caps.dtypes)]
    wanted += [(f"direction={d}", dict(cell=cell, direction=d)) for d in sorted(caps.directions)]
    wanted += [(f"recurrent_activation={a}", dict(cell=cell, recurrent_activation=a))
               for a in sorted(caps.recurrent_activations)]
    if "gru" in caps.cells:
        wanted += [(f"gru_reset_after={r}", dict(cell="gru", reset_after=r))
                   for r in sorted(caps.gru_reset_after)]
    features = {
        "peepholes": (lstm, dict(cell="lstm", peepholes=True)),
        "projection": (lstm, dict(cell="lstm", proj_size=2)),
        "cell_clip": (lstm, dict(cell="lstm", cell_clip=0.3)),
        "proj_clip": (lstm, dict(cell="lstm", proj_size=2, proj_clip=0.2)),
        "gate_clip": (True, dict(cell=cell, gate_clip=0.5)),
        "input_forget": (lstm, dict(cell="lstm", input_forget=True)),
        "forget_bias": (lstm, dict(cell="lstm", forget_bias=1.0)),
        "variable_lengths": (True, dict(cell=cell, seq_lengths=[3, 1])),
        "initial_state": (True, dict(cell=cell, initial_state="random")),
        "multi_layer": (True, dict(cell=cell, num_layers=2)),
    }
    for name, (applies, kw) in features.items():
        if getattr(caps, name) and applies:
            wanted.append((name, kw))
    # a GRU case in a reset mode the adapter declares (a check of another capability must not
    # stumble on the default reset_after=True)
    reset = {"reset_after": True in caps.gru_reset_after}
    return [(what, Case(name=f"contract-{i}", **{**base, **(reset if kw["cell"] == "gru" else {}),
                                                  **kw}))
            for i, (what, kw) in enumerate(wanted)]


def adapters() -> list[Any]:
    """Every adapter but the reference itself; the GPU ones carry the ``gpu`` marker."""
    return [pytest.param(a, id=a.name, marks=[pytest.mark.gpu] if a.device == "gpu" else [])
            for a in registry.ADAPTERS.values() if not a.baseline and not a.named_only]
    # a named-only adapter costs seconds a case (a conversion or a compile; torch-compile: 11
    # contract cases, minutes on 2 cores): its own test file checks each capability it declares,
    # and its declarations run by name (`broken_declarations(get_adapter(name))`)


def broken_declarations(adapter: Adapter) -> list[str]:
    """One line per declared capability whose minimal case does not give a result."""
    checks = contract_cases(adapter)
    # capabilities whose minimal case is the same case (cell=lstm, dtype=float32,
    # direction=forward, ... for most adapters) share one run: an exporting adapter's run is
    # an export (seconds)
    unique: dict[str, Case] = {}
    for _, case in checks:
        unique.setdefault(case.model_dump_json(exclude={"name"}), case)
    result = runner.run(list(unique.values()), [adapter])
    assert not result.case_errors, result.case_errors
    by_key = dict(zip(unique, result.pairs, strict=True))
    pairs = [by_key[case.model_dump_json(exclude={"name"})] for _, case in checks]
    broken = []
    for (what, case), pair in zip(checks, pairs, strict=True):
        # a known upstream bug ran the capability: the divergence is the framework's
        if pair.status not in (compare.PASS, compare.DIVERGED, compare.KNOWN_BUG):
            broken.append(f"{what}: {pair.status}: {pair.reason}")
        elif case.gradients and adapter.gradient_note(case) is None:
            outputs = set(pair.rows["output"]) if pair.has_rows else set()
            if "dx" not in outputs:
                broken.append(f"{what}: gradients declared but not compared ({sorted(outputs)})")
    return broken


@pytest.mark.parametrize("adapter", adapters())
def test_every_declared_capability_runs(adapter: Adapter) -> None:
    reason = isolation.unavailable_reason(adapter)  # where it runs (its own process, if any)
    if reason:
        pytest.skip(f"{adapter.name}: {reason}")
    broken = broken_declarations(adapter)
    assert not broken, f"{adapter.name} declares what it cannot run:\n" + "\n".join(broken)


def test_a_declared_backward_that_returns_nothing_is_caught() -> None:
    """``fault_adapters.Correct`` declares every capability, gradients included, but runs the
    forward only: every gradient case is a broken declaration."""
    broken = broken_declarations(Correct())
    assert broken and all("returned no gradients" in line for line in broken), broken
