"""Names checked against a registry (adapters, layouts): an unknown one is bad input, told
with the closest known names ("did you mean"). Here cases meet the adapter registry: the case
model and its loader (:mod:`harness.cases`) know nothing of the adapters, and the adapter names
a loaded case refers to are checked by :func:`check_case_adapters`."""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence

from harness.case_validation import all_of, did_you_mean
from harness.case_yaml import field_line, matrix_keys
from harness.errors import CaseError, HarnessError
from harness.spec import Case


def unknown(kind: str, names: str | list[str], known: list[str], field: str) -> HarnessError:
    """Unknown names (one or several), each with the closest known ones ("did you mean"), and
    all the known ones once."""
    each = []
    for name in [names] if isinstance(names, str) else names:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        if not close and len(name) >= 3:  # a short form: 'onnx' for onnxruntime
            close = [k for k in known if k.startswith(name.replace("_", "-"))][:3]
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        each.append(f"{name!r}{hint}")
    kinds = kind if len(each) == 1 else f"{kind}s"
    return HarnessError(f"unknown {kinds} {', '.join(each)}; known: {', '.join(known)}",
                        field=field)


def check_adapters(names: list[str] | None, field: str = "--adapters",
                   selections: bool = True) -> None:
    """Adapter names given on a command line or in code (None: none given): no empty name, no
    name twice (it would run and report the pairs twice), each one known (or "did you mean");
    ``selections``: ``all`` and ``every`` are names too (not for an option taking one
    adapter)."""
    from harness.adapters import ADAPTERS, SELECTIONS

    if names is None:
        return
    if not all(names):
        raise HarnessError(f"expected comma-separated adapter names, got {','.join(names)!r}",
                           field=field)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise HarnessError(f"{', '.join(twice)} named more than once", field=field)
    known = [*SELECTIONS, *ADAPTERS] if selections else list(ADAPTERS)
    missing = [n for n in names if n not in known]
    if missing:  # every one at once, not one per attempt
        raise unknown("adapter", missing, known, field)


def _case_adapter_mistakes(case: Case) -> list[tuple[tuple, str]]:
    """(field location, what is wrong) for each adapter name of ``case`` that is not known:
    in ``adapters:``, ``exclude:``, ``tolerance.adapters`` and ``expected``."""
    from harness.adapters import ADAPTERS

    found: list[tuple[tuple, str]] = []
    known = ["all", *ADAPTERS]
    for key in ("adapters", "exclude"):
        for i, name in enumerate(getattr(case, key)):
            if name not in known:
                found.append(((key, i), f"unknown adapter {name!r}" + did_you_mean(name, known)
                              + f" (known: {', '.join(known)})"))
    for where in (("tolerance", "adapters"), ("expected",)):
        holder = case.tolerance.adapters if where[0] == "tolerance" else case.expected
        for name in holder:
            if name not in ADAPTERS:
                found.append(((*where, name), f"unknown adapter {name!r}"
                              + did_you_mean(name, list(ADAPTERS))
                              + f" (known: {', '.join(ADAPTERS)})"))
            elif where == ("expected",) and ADAPTERS[name].baseline:
                found.append(((*where, name), f"{name} is the baseline every adapter is "
                              "compared with: it has no verdict to expect"))
    return found


def check_case_adapters(cases: Sequence[Case]) -> None:
    """The adapter names each case refers to exist (a typo would silently select none):
    the first case with unknown ones raises one :class:`CaseError` naming each, with its file,
    field and YAML line. A field a ``matrix:`` varies is told at the matrix key's line, with the
    entry's values (as the loader tells the other mistakes of a matrix entry)."""
    for case in cases:
        mistakes = _case_adapter_mistakes(case)
        if not mistakes:
            continue
        varied = matrix_keys(case.source)
        fields = case.model_dump(mode="json", exclude_none=True)
        entry = " [matrix: " + json.dumps({k: fields.get(k) for k in varied}) + "]"
        errors = []
        for loc, message in mistakes:
            if loc[0] in varied:
                message += entry
            errors.append(CaseError(message, file=case.source, field=".".join(map(str, loc)),
                                    line=field_line(case.source, loc)))
        raise all_of(errors)
