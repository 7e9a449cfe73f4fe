"""The package's version, in a module of its own: the run's record (run.json) reads it without
importing the package's public API (``harness/__init__.py``), which imports the run."""

from __future__ import annotations

__version__ = "0.1.0"
