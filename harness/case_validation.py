"""One case mapping validated into a :class:`harness.spec.Case`: pydantic's errors turned into
:class:`CaseError` lines naming the file, the field, the YAML line and what was expected
("did you mean" for a misspelled key or value), every mistake of a case in one error; and the
layout names and ``expected.ADAPTER.when`` keys a case refers to checked. The adapter names
are checked where cases meet the adapter registry (:func:`harness.names.check_case_adapters`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from harness.case_yaml import line_of
from harness.errors import CaseError
from harness.layouts import LAYOUTS
from harness.spec import Case, FieldError, TensorFile

# the keys ``expected.ADAPTER.when`` may test: the case's own keys but its name and expected
WHEN_KEYS = [k for k in Case.model_fields if k not in ("name", "source", "expected")]


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


def did_you_mean(word: Any, choices: list[str]) -> str:
    if not isinstance(word, str):
        return ""
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=0.6)
    return f"; did you mean {lower[close[0]]!r}?" if close else ""


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...' (" + f"{len(text)} chars)"


def _expected(err: dict, loc: tuple) -> str:
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return "unknown key" + did_you_mean(loc[-1] if loc else None, _known_keys(loc))
    if err["type"] == "missing":
        return "required key is missing"
    got = err.get("input")
    if err["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return f"expected a mapping of keys, got {_short(got)}"
    if err["type"] == "literal_error":
        choices = re.findall(r"'([^']*)'", err.get("ctx", {}).get("expected", ""))
        return f"{msg}, got {_short(got)}" + did_you_mean(got, choices)
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
                        line=line_of(node, ("source",)))
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
                                       line=line_of(node, loc))
        # an unknown key first (a misspelled key is also the reason a required one is
        # missing), then the others in the file's order
        raise all_of(sorted(found.values(), key=lambda e: (
            not e.message.startswith("unknown key"), e.line or 0))) from None
    _check_references(case, file, node)
    return case


MAX_MISTAKES_NAMED = 8  # of one case, in its one error line; the rest are counted


def all_of(errors: list[CaseError]) -> CaseError:
    """One error naming each of ``errors`` (each with its line and field), up to
    :data:`MAX_MISTAKES_NAMED`: bad input stays one line, and a user fixes every mistake at once
    instead of one a run."""
    first, others = errors[0], errors[1:MAX_MISTAKES_NAMED]
    if len(errors) > MAX_MISTAKES_NAMED:
        others.append(CaseError(f"{len(errors) - MAX_MISTAKES_NAMED} more not named"))
    return CaseError(first.message, file=first.file, field=first.field, line=first.line,
                     also=others)


def _check_references(case: Case, file: str, node: yaml.Node | None) -> None:
    """The layout a case names exists and has its cell, and its ``expected.ADAPTER.when`` keys
    are case keys (a typo would silently select none)."""
    found: list[CaseError] = []

    def fail(loc: tuple, message: str) -> None:
        found.append(CaseError(message, file=file, field=".".join(map(str, loc)),
                               line=line_of(node, loc)))

    if isinstance(case.weights, TensorFile) and case.weights.layout is not None:
        name = case.weights.layout
        layout = LAYOUTS.get(name)
        if layout is None:
            fail(("weights", "layout"), f"unknown layout {name!r}"
                 + did_you_mean(name, list(LAYOUTS)) + f" (known: {', '.join(LAYOUTS)})")
        elif case.cell not in layout.cells:
            fail(("weights", "layout"),
                 f"layout {name!r} has no {case.cell} (only {', '.join(layout.cells)})")
    for name, known in case.expected.items():
        for when_key in known.when or {}:
            if when_key not in WHEN_KEYS:
                fail(("expected", name, "when", when_key), "not a case key"
                     + did_you_mean(when_key, WHEN_KEYS) + f" (case keys: {', '.join(WHEN_KEYS)})")
    if found:
        raise all_of(found)


_KEY_LIKE = re.compile(r"^[A-Za-z0-9_+.=-]{1,64}$")  # case keys, adapter names, list indices


def _field_text(loc: tuple) -> str | None:
    """A field path for an error line, each part as written when it has the form of a key
    (``tolerance.adapters.torch-cpu``) and ``?`` when not: an unknown "key" of a file that is
    no case file (``root:*:20228:0:99999:7::`` of a password file) is not quoted."""
    return ".".join(str(p) if _KEY_LIKE.match(str(p)) else "?" for p in loc) or None

