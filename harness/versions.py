"""Installed versions, read from the distributions' metadata (no framework import)."""

from __future__ import annotations

import importlib.metadata
import re


def release(version: str) -> tuple[int, ...]:
    """The numeric release part of a version string: '2.13.0+cpu' -> (2, 13, 0)."""
    nums = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in nums.group(0).split(".")) if nums else ()


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None where it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
