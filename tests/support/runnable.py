"""The adapter a test needs, or the test skipped with the reason this machine cannot run it."""

from __future__ import annotations

import pytest

from harness import isolation
from harness.adapters import Adapter, get_adapter


def runnable(adapter: str | Adapter) -> Adapter:
    """``adapter`` (a name or an object) where it can run here, asked where it runs (its own
    process, if it has one); else the test is skipped with the reason."""
    if isinstance(adapter, str):
        adapter = get_adapter(adapter)
    reason = isolation.unavailable_reason(adapter)
    if reason:
        pytest.skip(f"{adapter.name} unavailable: {reason}")
    return adapter
