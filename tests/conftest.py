"""Fixtures shared by the harness's own tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from case_factory import case_maker

from harness.spec import Case


@pytest.fixture
def make_case(request: pytest.FixtureRequest) -> Callable[..., Case]:
    """``make_case(**kw)``: a small case (:func:`case_factory.case_maker`), over the test
    module's ``CASE_DEFAULTS`` if it has them."""
    return case_maker(**getattr(request.module, "CASE_DEFAULTS", {}))
