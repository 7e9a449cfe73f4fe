"""OpenVINO imported without its telemetry, and one ``ov.Core`` and ONNX frontend per process:
shared by the openvino adapters and compare's runs of a shipped IR or ``.onnx``."""

from __future__ import annotations

import sys
from typing import Any

from harness.errors import Unavailable

_CORE: Any = None
_FRONTEND: Any = None


def import_openvino():
    """(openvino, FrontEndManager), or Unavailable. ``import openvino`` imports its model
    converter, which sends a usage event and writes a client id under ``~/intel`` through the
    ``openvino_telemetry`` package when that is installed (openvino/tools/ovc/__init__.py);
    without it OpenVINO uses its own no-op stub. The harness writes nothing into the user's
    home and sends nothing, so the package is kept from being imported in this process."""
    if "openvino" not in sys.modules:
        sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
    try:
        import openvino
        from openvino.frontend import FrontEndManager
    except ImportError as exc:
        raise Unavailable(f"openvino is not installed ({exc}); pip install openvino") from None
    return openvino, FrontEndManager


def core() -> Any:
    """One ``ov.Core`` and ONNX frontend per process (made on first use): the core."""
    global _CORE, _FRONTEND
    if _CORE is None:
        ov, FrontEndManager = import_openvino()
        _CORE = ov.Core()
        _FRONTEND = FrontEndManager().load_by_framework("onnx")
    return _CORE


def onnx_frontend() -> Any:
    """The process's ONNX frontend (made with the core, :func:`core`)."""
    core()
    return _FRONTEND
