"""Which files are case files, read without running anything (:func:`is_case_file`)."""

from __future__ import annotations

import re
from pathlib import Path

CASE_SUFFIXES = (".yaml", ".yml")
# A case file is at most harness.cases.MAX_YAML_BYTES (1 MiB); its top-level keys are lines that
# start with the key. Scanning the first MiB for such a line decides without parsing anything,
# and still recognises a case file that is broken as YAML (its item then reports the error).
SCAN_BYTES = 1 << 20
_CASE_KEY = re.compile(rb"^(?:\xef\xbb\xbf)?(?:cell|matrix|\"cell\"|\"matrix\"|'cell'|'matrix')"
                       rb"[ \t]*:(?:[ \t\r]|$)", re.M)



def is_case_file(path: Path) -> bool:
    """Whether ``path`` is a ``.yaml``/``.yml`` regular file with a top-level ``cell:`` or
    ``matrix:`` key in its first MiB: a line that starts with one, or, in a file written as one
    flow mapping (``{cell: gru, ...}``, JSON), a key of that mapping. Nothing is run; only a
    flow mapping is parsed (safe_load)."""
    if path.suffix not in CASE_SUFFIXES or not path.is_file():  # is_file: no FIFO, no device
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(SCAN_BYTES)
    except OSError:  # unreadable: not collected unless named (then its item says why)
        return False
    return _CASE_KEY.search(head) is not None or _flow_mapping_has_case_key(head)


def _flow_mapping_has_case_key(head: bytes) -> bool:
    first = next((line.strip() for line in head.removeprefix(b"\xef\xbb\xbf").splitlines()
                  if line.strip() and not line.strip().startswith((b"#", b"%", b"---"))), b"")
    if not first.startswith(b"{"):
        return False
    import yaml

    try:
        data = yaml.safe_load(head.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False  # a broken one is a case file only when named
    return isinstance(data, dict) and ("cell" in data or "matrix" in data)
