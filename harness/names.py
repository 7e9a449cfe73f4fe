"""Names checked against a registry (adapters, layouts): an unknown one is bad input, told
with the closest known names ("did you mean")."""

from __future__ import annotations

import difflib

from harness.errors import HarnessError


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
