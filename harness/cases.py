"""Case files: loading one (``matrix:`` expansion, name templates, ``expected.ADAPTER.when``)
and finding them in folders (links that lead outside a folder refused, names unique).

A case file holds one case, or a ``matrix:`` mapping of keys to lists of values whose
cartesian product expands the remaining keys into many cases. Paths inside a case are relative
to the case file's folder. Every problem is raised as :class:`CaseError` naming the file, the
field, the YAML line and what was expected. The model itself is :class:`harness.spec.Case`;
the YAML is read by :mod:`harness.case_yaml`, each case validated by
:mod:`harness.case_validation`; the adapter names a case refers to are checked where cases
meet the adapters (:func:`harness.names.check_case_adapters`, called by :mod:`harness.plan`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import string
from pathlib import Path
from typing import Any

import yaml

from harness.case_validation import did_you_mean, validate_case
from harness.case_yaml import line_of, read_yaml
from harness.errors import CaseError
from harness.spec import Case

MAX_MATRIX_CASES = 10_000  # a matrix is a handful of variations, not a generator of millions

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


def _apply_when(cases: list[Case], file: str, node: yaml.Node | None) -> list[Case]:
    """The cases of one file, each keeping only the ``expected:`` entries whose ``when`` its
    fields match. An entry that matches none of the file's cases is an error: a misspelled
    value would otherwise drop the expectation without a word."""
    for name, known in cases[0].expected.items() if cases else ():
        if known.when and not any(known.holds_for(c) for c in cases):
            raise CaseError(f"matches none of the file's cases: {json.dumps(known.when)}",
                            file=file, field=f"expected.{name}.when",
                            line=line_of(node, ("expected", name, "when")))
    return [c if all(k.holds_for(c) for k in c.expected.values())
            else c.model_copy(update={"expected": {n: k for n, k in c.expected.items()
                                                   if k.holds_for(c)}})
            for c in cases]


def load_cases(path: str | Path) -> list[Case]:
    """Load a case file, expanding ``matrix:`` into one case per combination."""
    path = Path(path)
    data, node = read_yaml(path)
    file = str(path)
    if not isinstance(data, dict):
        raise CaseError(f"expected a mapping of case keys at the top level, got "
                        f"{type(data).__name__ if data is not None else 'an empty document'}",
                        file=file, line=node.start_mark.line + 1 if node is not None else 1)
    matrix = data.pop("matrix", None)
    if matrix is None:
        return _apply_when([validate_case(data, file=file, node=node)], file, node)
    mline = line_of(node, ("matrix",))
    if not isinstance(matrix, dict) or not matrix:
        raise CaseError("expected a mapping of key -> list of values", file=file, field="matrix",
                        line=mline)
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise CaseError("expected a non-empty list of values", file=file, field=f"matrix.{key}",
                            line=line_of(node, ("matrix", key)))
        if key == "name" or key not in Case.model_fields or key == "source":
            known = [k for k in Case.model_fields if k not in ("name", "source")]
            raise CaseError("not a case key that can vary" + did_you_mean(key, known), file=file,
                            field=f"matrix.{key}", line=line_of(node, ("matrix", key)))
    count = math.prod(len(v) for v in matrix.values())
    if count > MAX_MATRIX_CASES:
        raise CaseError(f"matrix expands to {count} cases, more than the {MAX_MATRIX_CASES} "
                        "allowed",
                        file=file, field="matrix", line=mline)
    base_name = data.get("name", "")
    if isinstance(base_name, str) and "{" in base_name:
        _check_template(base_name, list(matrix), file, line_of(node, ("name",)))
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
                            line=line_of(node, ("name",)))
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise CaseError(f"name template cannot be filled: {str(exc)[:200]}", file=file,
                        field="name", line=line_of(node, ("name",))) from None


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
            exc.line = line_of(node, ("matrix", exc.field.split(".")[0]))
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

