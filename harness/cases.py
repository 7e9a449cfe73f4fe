"""Case files: YAML reading with line numbers, ``matrix:`` expansion, discovery of case files,
and the check that the adapter and layout names a case refers to exist.

A case file holds one case, or a ``matrix:`` mapping of keys to lists of values whose
cartesian product expands the remaining keys into many cases. Paths inside a case are relative
to the case file's folder. Every problem is raised as :class:`CaseError` naming the file, the
field, the YAML line and what was expected. The model itself is :class:`harness.spec.Case`.
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import os
import re
import stat
import string
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from harness.adapters import ADAPTERS
from harness.errors import CaseError
from harness.layouts import LAYOUTS
from harness.spec import Case, FieldError, TensorFile

MAX_YAML_BYTES = 1 << 20  # a case file is a page of YAML, not a data file
MAX_MATRIX_CASES = 10_000  # a matrix is a handful of variations, not a generator of millions
MAX_YAML_DEPTH = 50  # case files nest three levels deep; deeper is an attack or an accident

# the keys ``expected.ADAPTER.when`` may test: the case's own keys but its name and expected
WHEN_KEYS = [k for k in Case.model_fields if k not in ("name", "source", "expected")]

_ABBREV = {
    "hidden_size": "h", "input_size": "i", "num_layers": "L", "proj_size": "p", "batch": "b",
    "seq_len": "t", "seed": "seed", "cell_clip": "cclip", "proj_clip": "pclip",
    "gate_clip": "gclip",
    "forget_bias": "fb",
}


def _suffix(key: str, value: Any) -> str:
    if key in ("dtype", "cell", "direction", "initial_state", "recurrent_activation"):
        return str(value)
    if isinstance(value, bool):
        return key if value else f"no_{key}"
    return f"{_ABBREV.get(key, key)}{value}"


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
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


def _known_keys(loc: tuple) -> list[str]:
    """The keys allowed in the mapping that holds ``loc`` (for "did you mean")."""
    model: Any = Case
    for part in loc[:-1]:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        if info is None:
            return []
        model = next((t for t in getattr(info.annotation, "__args__", (info.annotation,))
                      if isinstance(t, type) and issubclass(t, BaseModel)), None)
        if model is None:
            return []
    return [k for k in model.model_fields if k != "source"]


def _did_you_mean(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.6)
    return f"; did you mean {lower[close[0]]!r}?" if close else ""


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
        return _line_of(node, loc)
    matrix = top.get("matrix")
    if isinstance(matrix, yaml.MappingNode) and any(getattr(k, "value", None) == loc[0]
                                                    for k, _ in matrix.value):
        return _line_of(node, ("matrix", loc[0]))
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...' (" + f"{len(text)} chars)"


def _expected(err: dict, loc: tuple) -> str:
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return "unknown key" + _did_you_mean(loc[-1] if loc else None, _known_keys(loc))
    if err["type"] == "missing":
        return "required key is missing"
    got = err.get("input")
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping of keys, got {_short(got)}"
    if err["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        return f"{msg}, got {_short(got)}" + _did_you_mean(got, choices)
    if err["type"] not in ("value_error",) and not isinstance(got, dict | list):
        return f"{msg}, got {_short(got)}"
    return msg.removeprefix("Value error, ")


def _is_member(part: Any) -> bool:
    return isinstance(part, str) and part[:1].isupper()


def _clean_loc(loc: tuple) -> tuple:
    # pydantic names union members in the location ("weights.GeneratedTensors.init"); drop them
    return tuple(p for p in loc if not _is_member(p))


def _best_union_member(errors: list[dict]) -> list[dict]:
    """Of a union's members (weights: generated | file), keep the errors of the one the input
    came closest to (fewest errors): ``{file: 12}`` is a file with a bad name, not a generated
    spec with an unknown key."""
    branches: dict[tuple, dict[str, int]] = {}
    for e in errors:
        for i, part in enumerate(e["loc"]):
            if _is_member(part):
                counts = branches.setdefault(e["loc"][:i], {})
                counts[part] = counts.get(part, 0) + 1
                break
    best = {where: min(counts, key=counts.get) for where, counts in branches.items()}

    def kept(e: dict) -> bool:
        for i, part in enumerate(e["loc"]):
            if _is_member(part):
                return best.get(e["loc"][:i]) == part
        return True

    return [e for e in errors if kept(e)] or errors


def validate_case(data: Any, *, file: str, node: yaml.Node | None = None) -> Case:
    """Validate one expanded case mapping, raising CaseError with file, field and line."""
    if not isinstance(data, dict):
        raise CaseError(f"expected a mapping of case keys, got {type(data).__name__}", file=file)
    if "source" in data:
        raise CaseError("unknown key (source is set by the loader)", file=file, field="source",
                        line=_line_of(node, ("source",)))
    try:
        case = Case.model_validate({**data, "source": file})
    except ValidationError as exc:
        found: dict[tuple, CaseError] = {}  # one mistake a field
        for err in _best_union_member(exc.errors()):
            loc = _clean_loc(err["loc"])
            cause = err.get("ctx", {}).get("error")
            if not loc and isinstance(cause, FieldError):  # a cross-field check names its field
                loc = tuple(cause.field.split("."))
            if loc not in found:
                found[loc] = CaseError(_expected(err, loc), file=file, field=_field_text(loc),
                                       line=_line_of(node, loc))
        # an unknown key first (a misspelled key is also the reason a required one is
        # missing), then the others in the file's order
        raise _all_of(sorted(found.values(), key=lambda e: (
            not e.message.startswith("unknown key"), e.line or 0))) from None
    _check_references(case, file, node)
    return case


MAX_MISTAKES_NAMED = 8  # of one case, in its one error line; the rest are counted


def _all_of(errors: list[CaseError]) -> CaseError:
    """One error naming each of ``errors`` (each with its line and field), up to
    :data:`MAX_MISTAKES_NAMED`: bad input stays one line, and a user fixes every mistake at once
    instead of one a run."""
    first, others = errors[0], errors[1:MAX_MISTAKES_NAMED]
    if len(errors) > MAX_MISTAKES_NAMED:
        others.append(CaseError(f"{len(errors) - MAX_MISTAKES_NAMED} more not named"))
    return CaseError(first.message, file=first.file, field=first.field, line=first.line,
                     also=others)


def _check_references(case: Case, file: str, node: yaml.Node | None) -> None:
    """The layout and adapter names a case refers to exist (a typo would silently select none)."""
    found: list[CaseError] = []

    def fail(loc: tuple, message: str) -> None:
        found.append(CaseError(message, file=file, field=".".join(map(str, loc)),
                               line=_line_of(node, loc)))

    if isinstance(case.weights, TensorFile) and case.weights.layout is not None:
        name = case.weights.layout
        layout = LAYOUTS.get(name)
        if layout is None:
            fail(("weights", "layout"), f"unknown layout {name!r}"
                 + _did_you_mean(name, list(LAYOUTS)) + f" (known: {', '.join(LAYOUTS)})")
        elif case.cell not in layout.cells:
            fail(("weights", "layout"),
                 f"layout {name!r} has no {case.cell} (only {', '.join(layout.cells)})")
    known = ["all", *ADAPTERS]
    for key in ("adapters", "exclude"):
        for i, name in enumerate(getattr(case, key)):
            if name not in known:
                fail((key, i), f"unknown adapter {name!r}" + _did_you_mean(name, known)
                     + f" (known: {', '.join(known)})")
    for key in (("tolerance", "adapters"), ("expected",)):
        holder = case.tolerance.adapters if key[0] == "tolerance" else case.expected
        for name in holder:
            if name not in ADAPTERS:
                fail((*key, name), f"unknown adapter {name!r}"
                     + _did_you_mean(name, list(ADAPTERS)) + f" (known: {', '.join(ADAPTERS)})")
            elif key == ("expected",) and ADAPTERS[name].baseline:
                fail((*key, name), f"{name} is the baseline every adapter is compared with: it "
                     "has no verdict to expect")
    for name, known in case.expected.items():
        for when_key in known.when or {}:
            if when_key not in WHEN_KEYS:
                fail(("expected", name, "when", when_key), "not a case key"
                     + _did_you_mean(when_key, WHEN_KEYS) + f" (case keys: {', '.join(WHEN_KEYS)})")
    if found:
        raise _all_of(found)


def _apply_when(cases: list[Case], file: str, node: yaml.Node | None) -> list[Case]:
    """The cases of one file, each keeping only the ``expected:`` entries whose ``when`` its
    fields match. An entry that matches none of the file's cases is an error: a misspelled
    value would otherwise drop the expectation without a word."""
    for name, known in cases[0].expected.items() if cases else ():
        if known.when and not any(known.holds_for(c) for c in cases):
            raise CaseError(f"matches none of the file's cases: {json.dumps(known.when)}",
                            file=file, field=f"expected.{name}.when",
                            line=_line_of(node, ("expected", name, "when")))
    return [c if all(k.holds_for(c) for k in c.expected.values())
            else c.model_copy(update={"expected": {n: k for n, k in c.expected.items()
                                                   if k.holds_for(c)}})
            for c in cases]


def _read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
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


_KEY_LIKE = re.compile(r"^[A-Za-z0-9_+.=-]{1,64}$")  # case keys, adapter names, list indices


def _field_text(loc: tuple) -> str | None:
    """A field path for an error line, each part as written when it has the form of a key
    (``tolerance.adapters.torch-cpu``) and ``?`` when not: an unknown "key" of a file that is
    no case file (``root:*:20228:0:99999:7::`` of a password file) is not quoted."""
    return ".".join(str(p) if _KEY_LIKE.match(str(p)) else "?" for p in loc) or None


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


def load_cases(path: str | Path) -> list[Case]:
    """Load a case file, expanding ``matrix:`` into one case per combination."""
    path = Path(path)
    data, node = _read_yaml(path)
    file = str(path)
    if not isinstance(data, dict):
        raise CaseError(f"expected a mapping of case keys at the top level, got "
                        f"{type(data).__name__ if data is not None else 'an empty document'}",
                        file=file, line=node.start_mark.line + 1 if node is not None else 1)
    matrix = data.pop("matrix", None)
    if matrix is None:
        return _apply_when([validate_case(data, file=file, node=node)], file, node)
    mline = _line_of(node, ("matrix",))
    if not isinstance(matrix, dict) or not matrix:
        raise CaseError("expected a mapping of key -> list of values", file=file, field="matrix",
                        line=mline)
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise CaseError("expected a non-empty list of values", file=file, field=f"matrix.{key}",
                            line=_line_of(node, ("matrix", key)))
        if key == "name" or key not in Case.model_fields or key == "source":
            known = [k for k in Case.model_fields if k not in ("name", "source")]
            raise CaseError("not a case key that can vary" + _did_you_mean(key, known), file=file,
                            field=f"matrix.{key}", line=_line_of(node, ("matrix", key)))
    count = math.prod(len(v) for v in matrix.values())
    if count > MAX_MATRIX_CASES:
        raise CaseError(f"matrix expands to {count} cases, more than the {MAX_MATRIX_CASES} "
                        "allowed",
                        file=file, field="matrix", line=mline)
    base_name = data.get("name", "")
    if isinstance(base_name, str) and "{" in base_name:
        _check_template(base_name, list(matrix), file, _line_of(node, ("name",)))
    cases, names = [], set()
    keys = list(matrix)
    for combo in itertools.product(*(matrix[k] for k in keys)):
        values = dict(zip(keys, combo, strict=True))
        expanded = {**data, **values}
        if isinstance(base_name, str) and "{" in base_name:
            expanded["name"] = _fill_template(base_name, values, file, node)
        else:
            expanded["name"] = "-".join([str(base_name)]
                                        + [_suffix(k, v) for k, v in values.items()])
        case = _validate_expanded(expanded, file, node, values)
        if case.name in names:
            raise CaseError(f"matrix expands to the name {case.name!r} twice", file=file,
                            field="name")
        names.add(case.name)
        cases.append(case)
    return _apply_when(cases, file, node)


def _fill_template(template: str, values: dict, file: str, node: yaml.Node | None) -> str:
    """The name of one matrix entry from its template (checked by :func:`_check_template`).
    A field takes a number, string or boolean: a list or mapping value (``seq_lengths``,
    ``expected``) has no format of its own, and is refused naming the template's field."""
    used = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    for key in used:
        if isinstance(values.get(key), list | dict):
            kind = "list" if isinstance(values[key], list) else "mapping"
            raise CaseError(f"name template cannot be filled: {{{key}}} takes a number, string "
                            f"or boolean, but matrix.{key} gives a {kind}; name the entries "
                            "without it", file=file, field="name",
                            line=_line_of(node, ("name",)))
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise CaseError(f"name template cannot be filled: {str(exc)[:200]}", file=file,
                        field="name", line=_line_of(node, ("name",))) from None


def _check_template(template: str, keys: list[str], file: str, line: int | None) -> None:
    """A name template may use ``{key}`` of the matrix keys with a short format (``{seed:03d}``);
    no attribute or index lookups, no widths that would build huge strings."""
    def fail(why: str) -> None:
        raise CaseError(f"name template cannot be filled: {why}", file=file, field="name",
                        line=line)

    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        fail(str(exc))
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in keys:
            fail(f"{{{name}}} is not a matrix key (matrix keys: {', '.join(keys)})")
        if conversion or len(spec) > 8 or any(int(n) > 100 for n in re.findall(r"\d+", spec)):
            fail(f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}} "
                 "is not a plain field with a short format")


def _validate_expanded(expanded: dict, file: str, node: yaml.Node | None, values: dict) -> Case:
    try:
        return validate_case(expanded, file=file, node=node)
    except CaseError as exc:
        if exc.field and exc.field.split(".")[0] in values:
            exc.line = _line_of(node, ("matrix", exc.field.split(".")[0]))
        exc.message += " [matrix: " + json.dumps(values) + "]"
        raise


def _case_files(folder: Path) -> list[Path]:
    """The ``*.yaml``/``*.yml`` regular files under ``folder``, sorted. Symlinked folders are
    not entered (``os.walk``); a symlinked file that leads out of the folder is refused, never
    read: a link to a credentials file must not reach an error line."""
    root = folder.resolve()
    found = []
    for where, dirs, names in os.walk(folder):
        dirs.sort()
        for name in names:
            q = Path(where) / name
            if q.suffix not in (".yaml", ".yml"):
                continue
            refuse_outside(q, folder, resolved=root)
            if q.is_file():
                found.append(q)
    return sorted(found)


def refuse_outside(path: Path, folder: Path, *, resolved: Path | None = None) -> None:
    """The rule for a case file found in a walk of ``folder`` (``run``'s folders, the pytest
    plugin's collection): one that leads outside the folder through a link, of its own or of a
    folder between, is refused and never read, so that a link to a credentials file cannot reach
    an error line. Links above ``folder`` are the user's own path: ``resolved`` is the folder
    with them followed."""
    root = resolved if resolved is not None else folder.resolve()
    if not path.resolve().is_relative_to(root):
        raise CaseError(f"is a link to a file outside {folder}: not followed (give the file "
                        "itself to run it)", file=path)


def load_found(path: str | Path, folder: str | Path) -> list[Case]:
    """:func:`load_cases` of a file found in a walk of ``folder``, under
    :func:`refuse_outside`'s rule (the pytest plugin's loader; ``run`` applies the rule to the
    whole folder before loading any file)."""
    refuse_outside(Path(path), Path(folder))
    return load_cases(path)


def _links_outside(path: Path) -> bool:
    """A link (at any step) to a file outside the folder the path names."""
    return path.is_symlink() and not path.resolve().is_relative_to(path.parent.resolve())


def load_named(path: str | Path) -> list[Case]:
    """:func:`load_cases` of a file the user named (on ``run``'s or pytest's command line). One
    that is a link to a file outside its folder (``x.yaml`` -> ``/etc/shadow``) is read, as the
    user asked, but an error in it quotes nothing of it: only that it is no case file."""
    path = Path(path)
    if not _links_outside(path):
        return load_cases(path)
    try:
        return load_cases(path)
    except CaseError:
        raise CaseError("not a valid case file; it is a link to a file outside its folder, so "
                        "nothing of it is quoted (give the file itself to see where)",
                        file=path) from None


def discover(paths: list[str | Path]) -> list[Case]:
    """Cases from files and folders (``*.yaml``/``*.yml``, sorted), names unique across all."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += _case_files(p)
        elif p.exists():
            if not p.is_file():  # a FIFO would block the first read forever
                raise CaseError("not a regular file (a FIFO, device or socket): refused", file=p)
            files.append(p)
        else:
            raise CaseError("no such file or folder", file=p)
    cases: list[Case] = []
    seen: dict[str, str] = {}
    for f in files:
        for case in load_named(f):
            if case.name in seen:
                raise CaseError(f"case name {case.name!r} is already used in {seen[case.name]}",
                                file=f, field="name")
            seen[case.name] = str(f)
            cases.append(case)
    return cases
