"""Names given on the command line (adapters, layouts), checked against the registries: an
unknown one is bad input (exit 2) with the closest known names (:mod:`harness.names`)."""

from __future__ import annotations

from harness.names import check_adapters, unknown


def check_layout(name: str | None, field: str) -> None:
    from harness.layouts import LAYOUTS

    if name is not None and name not in LAYOUTS:
        raise unknown("layout", name, list(LAYOUTS), field)


__all__ = ["check_adapters", "check_layout", "unknown"]
