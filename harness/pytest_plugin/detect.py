"""Which files are case files, read without running anything (:func:`is_case_file`).

The plugin is loaded into every pytest run of an environment that has the package, so a
project's own YAML (a ``.travis.yml`` with a top-level ``matrix:``, a config with a ``cell:``)
must not become a failing item: a file is collected only when it is recognisably a case file.
"""

from __future__ import annotations

import re
from pathlib import Path

CASE_SUFFIXES = (".yaml", ".yml")
# A case file is at most harness.case_yaml.MAX_YAML_BYTES (1 MiB); its top-level keys are lines that
# start with the key. Scanning the first MiB for such a line decides without parsing anything,
# and still recognises a case file that is broken as YAML (its item then reports the error).
SCAN_BYTES = 1 << 20
# the quick test, on bytes: a line that starts with a top-level cell: or matrix: key
_CASE_KEY = re.compile(rb"^(?:\xef\xbb\xbf)?(?:cell|matrix|\"cell\"|\"matrix\"|'cell'|'matrix')"
                       rb"[ \t]*:(?:[ \t\r]|$)", re.M)
_COMMENT = r"(?:[ \t]+#[^\n]*)?"
# top-level `cell: lstm` (quoted or not, a comment after it)
_CELL_LINE = re.compile(r"^\ufeff?(?:cell|\"cell\"|'cell')[ \t]*:[ \t]*"
                        r"(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s#'\"]+))"
                        + _COMMENT + r"[ \t\r]*$", re.M)
# top-level `matrix:` with what follows it on its line
_MATRIX_LINE = re.compile(r"^\ufeff?(?:matrix|\"matrix\"|'matrix')[ \t]*:(?P<rest>[^\n]*)$",
                          re.M)
_BLOCK_KEY = re.compile(r"^(?P<indent>[ \t]+)(?:\"(?P<dq>[^\"\n]*)\"|'(?P<sq>[^'\n]*)'|"
                        r"(?P<bare>[^\s:#'\"\-][^\s:]*))[ \t]*:(?:[ \t\r]|$)")


def is_case_file(path: Path) -> bool:
    """Whether ``path`` is a ``.yaml``/``.yml`` regular file that is recognisably a case file,
    read from its first MiB as text: a top-level ``cell:`` naming a cell kind (``cell: lstm``),
    or a top-level ``matrix:`` whose keys are all case keys, ``cell`` among them. A file written
    as one flow mapping (``{cell: gru, ...}``, JSON) is parsed (safe_load) for the same keys.
    Nothing is run, and a case file that is broken further on is still recognised (its item
    then fails with the error)."""
    if path.suffix not in CASE_SUFFIXES or not path.is_file():  # is_file: no FIFO, no device
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(SCAN_BYTES)
    except OSError:  # unreadable: not collected unless named (then its item says why)
        return False
    if _CASE_KEY.search(head) is not None:
        text = head.decode("utf-8", errors="replace")
        if _names_a_cell(text) or _matrix_of_case_keys(text):
            return True
    return _flow_mapping_is_case(head)


def _cell_kinds() -> set[str]:
    from harness.cells import CELLS

    return {name.lower() for name in CELLS}


def _case_keys() -> set[str]:
    """The keys a ``matrix:`` may vary (harness.cases refuses the others)."""
    from harness.spec import Case  # pydantic: imported only for a file with a top-level matrix:

    return set(Case.model_fields) - {"name", "source"}


def _names_a_cell(text: str) -> bool:
    kinds = _cell_kinds()
    return any((m["dq"] if m["dq"] is not None else m["sq"] if m["sq"] is not None
                else m["bare"]).lower() in kinds for m in _CELL_LINE.finditer(text))


def _matrix_of_case_keys(text: str) -> bool:
    for m in _MATRIX_LINE.finditer(text):
        rest = m["rest"].strip()
        if rest.startswith("{"):
            keys = _flow_keys(rest + text[m.end():])
        elif rest and not rest.startswith("#"):
            continue  # a scalar or a list: no keys
        else:
            keys = _block_keys(text[m.end() + 1:])
        if keys and "cell" in keys and keys <= _case_keys():
            return True
    return False


def _block_keys(text: str) -> set[str] | None:
    """The keys of the block mapping that starts at ``text`` (the lines below ``matrix:``): the
    lines at its first indentation that start with a key; None where one of them holds
    something else."""
    keys: set[str] = set()
    indent = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line[:1].isspace():
            break  # the next top-level key
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width > indent:
            continue
        if width < indent:
            return None
        if stripped.startswith("- ") or stripped == "-":
            continue  # a key's list, written at the key's own indentation
        k = _BLOCK_KEY.match(line)
        if k is None:
            return None
        keys.add(k["dq"] if k["dq"] is not None else k["sq"] if k["sq"] is not None
                 else k["bare"])
    return keys


def _flow_keys(text: str) -> set[str] | None:
    """The keys of the flow mapping ``{...}`` at the start of ``text``, read at its own depth
    (values in brackets or inner braces are passed over); None where it does not close."""
    keys: set[str] = set()
    depth, i, expect_key = 0, 0, False
    while i < len(text):
        c = text[i]
        if c in "\"'":
            end = text.find(c, i + 1)
            if end < 0:
                return None
            if depth == 1 and expect_key:
                keys.add(text[i + 1:end])
                expect_key = False
            i = end + 1
            continue
        if c in "{[":
            depth += 1
            expect_key = depth == 1 and c == "{"
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return keys
        elif c == "," and depth == 1:
            expect_key = True
        elif depth == 1 and expect_key and not c.isspace():
            m = re.match(r"[^\s:,{}\[\]]+", text[i:])
            word = m.group() if m else c
            keys.add(word)
            expect_key = False
            i += len(word)
            continue
        i += 1
    return None


def _flow_mapping_is_case(head: bytes) -> bool:
    first = next((line.strip() for line in head.removeprefix(b"\xef\xbb\xbf").splitlines()
                  if line.strip() and not line.strip().startswith((b"#", b"%", b"---"))), b"")
    if not first.startswith(b"{"):
        return False
    import yaml

    try:
        data = yaml.safe_load(head.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False  # a broken one is a case file only when named
    if not isinstance(data, dict):
        return False
    cell, matrix = data.get("cell"), data.get("matrix")
    if isinstance(cell, str) and cell.lower() in _cell_kinds():
        return True
    return (isinstance(matrix, dict) and "cell" in matrix
            and all(isinstance(k, str) for k in matrix) and set(matrix) <= _case_keys())
