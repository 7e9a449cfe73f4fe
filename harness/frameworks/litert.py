"""Importing the LiteRT interpreter (``ai_edge_litert``): what the LiteRT adapters, ``compare`` of
a ``.tflite`` file and the integer reference's kernel comparison share."""

from __future__ import annotations

from harness.errors import Unavailable


def import_litert():
    """The LiteRT Interpreter class, or Unavailable."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:
        raise Unavailable(f"ai-edge-litert is not installed ({exc}); "
                          "pip install ai-edge-litert") from None
    return Interpreter
