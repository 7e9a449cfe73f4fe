"""Reading a case file's YAML safely: a size limit, UTF-8, regular files only, no aliases, no
duplicate keys, no absurd nesting, no octal-looking integers; and the YAML line of a field
(for error lines). Every problem is raised as :class:`CaseError` naming the file and line;
PyYAML's own text is shown without what it quotes of the file."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from harness.errors import CaseError

MAX_YAML_BYTES = 1 << 20  # a case file is a page of YAML, not a data file
MAX_YAML_DEPTH = 50  # case files nest three levels deep; deeper is an attack or an accident


def line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the YAML node at ``loc`` (a pydantic error location), best effort."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            # the key's line: a block mapping or list value starts on the line after its key
            item = next(((k, v) for k, v in node.value if getattr(k, "value", None) == str(part)),
                        None)
            if item is None:
                return line
            line, node = item[0].start_mark.line + 1, item[1]
        elif (isinstance(node, yaml.SequenceNode) and isinstance(part, int)
              and part < len(node.value)):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def field_line(file: str | Path | None, loc: tuple) -> int | None:
    """Best-effort YAML line of the key at ``loc`` in a case file, or of that key in its
    ``matrix:`` (for problems found after loading, such as a bad weights file)."""
    if not file or not loc:
        return None
    try:
        node = yaml.compose(Path(file).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except Exception:  # the file loaded before; if it cannot be read now, there is no line
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    top = {getattr(k, "value", None): v for k, v in node.value}
    if loc[0] in top:
        return line_of(node, loc)
    matrix = top.get("matrix")
    if isinstance(matrix, yaml.MappingNode) and any(getattr(k, "value", None) == loc[0]
                                                    for k, _ in matrix.value):
        return line_of(node, ("matrix", loc[0]))
    return None


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    try:
        # O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise CaseError(f"cannot read: {exc.strerror}", file=path) from None
    with open(fd, "rb") as f:  # at most one byte over the limit: /dev/zero, a sparse file
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CaseError("not a regular file (a FIFO, device or socket): refused", file=path)
        try:
            raw = f.read(MAX_YAML_BYTES + 1)
        except OSError as exc:
            raise CaseError(f"cannot read: {exc.strerror}", file=path) from None
    if len(raw) > MAX_YAML_BYTES:
        raise CaseError(f"case file too large: more than the {MAX_YAML_BYTES} allowed bytes",
                        file=path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaseError(f"not UTF-8 text (byte {exc.start})", file=path,
                        line=raw[: exc.start].count(b"\n") + 1) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_nodes(node, path)
        data = yaml.safe_load(text)  # safe: plain data only, a !!python tag is an error
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise CaseError(f"invalid YAML: {_quoted_short(exc.problem or exc.context)}", file=path,
                        line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise CaseError(f"invalid YAML: {_quoted_short(str(exc).splitlines()[0])}",
                        file=path) from None
    except RecursionError:  # PyYAML composes recursively
        raise CaseError(f"YAML nested too deeply (more than {MAX_YAML_DEPTH} levels)",
                        file=path) from None
    return data, node


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


# what PyYAML quotes that is not text of the file's own: punctuation (':', '-'), an escape
# ('\t') or a token kind ('<scalar>')
_PUNCTUATION = re.compile(r"^['\"]([^A-Za-z0-9'\"]{1,3}|\\[A-Za-z0-9]{1,8}|<[a-z ]{1,20}>)['\"]$")


def _quoted_short(problem: str | None) -> str:
    """PyYAML's problem text without what it quotes from the file (a tag such as
    ``!!python/object/apply:os.system``, a word of the line), but a punctuation character or
    an escape: a file that is not YAML (a credentials file) must not reach the terminal
    through the error line."""
    return _QUOTED.sub(lambda m: m.group() if _PUNCTUATION.match(m.group()) else "(not quoted)",
                       problem or "")


_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]+$")  # 017; not 0, 0x1f or 0o17


def _check_nodes(node: yaml.Node | None, path: Path) -> None:
    """Reject YAML aliases (a case never needs them, and they allow exponential expansion),
    duplicate keys (YAML would silently keep the last), absurd nesting and integers with a
    leading 0 (named by their key path, as validation names a field: ``matrix.hidden_size.1``)."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int, tuple[str, ...]]] = []  # node, depth, key path
    if node is not None:
        stack.append((node, 1, ()))
    while stack:
        n, depth, where = stack.pop()
        line = n.start_mark.line + 1
        if id(n) in seen:
            raise CaseError("YAML aliases (*name) are not allowed in case files", file=path,
                            line=line)
        seen.add(id(n))
        if depth > MAX_YAML_DEPTH:
            raise CaseError(f"YAML nested too deeply (more than {MAX_YAML_DEPTH} levels)",
                            file=path, line=line)
        if isinstance(n, yaml.MappingNode):
            keys: set[str] = set()
            for k, v in n.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else "?"
                if isinstance(k, yaml.ScalarNode):
                    if k.value in keys:
                        raise CaseError("duplicate key (YAML would silently keep the last)",
                                        file=path, field=".".join((*where, k.value)),
                                        line=k.start_mark.line + 1)
                    keys.add(k.value)
                stack += [(k, depth + 1, where), (v, depth + 1, (*where, str(key)))]
        elif isinstance(n, yaml.SequenceNode):
            stack += [(v, depth + 1, (*where, str(i))) for i, v in enumerate(n.value)]
        elif (isinstance(n, yaml.ScalarNode) and n.tag == "tag:yaml.org,2002:int"
              and _LEADING_ZERO.match(n.value)):
            raise CaseError(f"integer {n.value} has a leading 0, which YAML 1.1 reads as octal "
                            f"({yaml.safe_load(n.value)}); write it without the 0", file=path,
                            field=".".join(where) or None, line=line)



def matrix_keys(file: str | Path | None) -> list[str]:
    """The keys a case file's ``matrix:`` varies (best effort, as :func:`field_line`: none
    where the file cannot be read again)."""
    if not file:
        return []
    try:
        data = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
    except Exception:  # the file loaded before; if it cannot be read now, there is no matrix
        return []
    matrix = data.get("matrix") if isinstance(data, dict) else None
    return [str(k) for k in matrix] if isinstance(matrix, dict) else []
