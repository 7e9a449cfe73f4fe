"""docs/api.md names every public attribute of the results the API returns: each class's table
(``| `CheckResult` attribute | what |``) lists exactly its dataclass fields, properties and
methods whose names do not start with ``_`` (classmethods are the harness's own constructors
from its internal results: not listed)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import harness

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
RESULTS = ("CheckResult", "PairCheck", "Divergence", "Diagnosis")
HEADER = re.compile(r"^\| `(\w+)` (?:attribute|field) \| what \|\n\|---\|---\|\n"
                    r"((?:\|.*\|\n)+)", re.M)


def public_attributes(cls: type) -> set[str]:
    names = {f.name for f in dataclasses.fields(cls)}
    for klass in cls.__mro__[:-1]:
        names |= {k for k, v in vars(klass).items() if not k.startswith("_")
                  and not isinstance(v, classmethod | staticmethod)
                  and k not in ("__dataclass_fields__",)}
    return names


def documented(text: str) -> dict[str, set[str]]:
    """Class -> the names its table's first column gives (``pair(adapter, case=None)`` names
    ``pair``)."""
    return {m[1]: {re.match(r"\w+", name)[0] for row in m[2].splitlines()
                   for name in re.findall(r"`([^`]+)`", row.split("|")[1])}
            for m in HEADER.finditer(text)}


def test_the_parser_reads_a_table() -> None:
    text = "| `R` attribute | what |\n|---|---|\n| `a`, `b` | x `c` |\n| `f(x, y=1)` | z |\n"
    assert documented(text) == {"R": {"a", "b", "f"}}


def test_every_public_attribute_of_the_results_is_in_docs_api_md() -> None:
    tables = documented(DOC.read_text(encoding="utf-8"))
    assert set(RESULTS) <= set(tables), f"docs/api.md has no table for {set(RESULTS) - set(tables)}"
    checked = 0
    for name in RESULTS:
        cls = getattr(harness, name)
        assert dataclasses.is_dataclass(cls)
        public = public_attributes(cls)
        assert tables[name] - public == set(), f"{name}: documented, not an attribute"
        assert public - tables[name] == set(), f"{name}: attributes missing from docs/api.md"
        checked += 1
    assert checked == len(RESULTS)
    assert "pairs" in tables["CheckResult"]  # the attribute the docs once left out
