"""The docs say what the adapter registry says about the default selection: the named-only
adapters (:attr:`harness.adapters.Adapter.named_only`) are one generated list wherever the docs
list them (docs/gen_named_only.py), docs/adapters.md's rows say "run when named" for exactly
those, and no doc keeps one "in the default selection"."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from harness.adapters import ADAPTERS

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAMED_ONLY = {a.name for a in ADAPTERS.values() if a.named_only is not None}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_named_only",
                                                  ROOT / "docs" / "gen_named_only.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_list_of_named_only_adapters_is_the_registrys():
    gen = _generator()
    holders = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in gen.BLOCK.finditer(text):
            holders.append(doc.relative_to(ROOT).as_posix())
            assert set(re.findall(r"`([^`]+)`", block["body"])) == NAMED_ONLY, (
                f"{doc.name}'s list of named-only adapters is stale: run "
                "python docs/gen_named_only.py")
        assert gen.regenerate(text) == text
    # where a user reads about the default selection, the list is there
    assert {"README.md", "docs/adapters.md", "docs/deployment.md"} <= set(holders), holders


def test_the_adapter_table_says_run_when_named_for_exactly_the_named_only_adapters():
    text = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    checked = set()
    for row in rows:
        first, rest = row.split("|")[1], "|".join(row.split("|")[2:])
        names = re.findall(r"`([^`]+)`", first)
        checked |= set(names)
        only = [n for n in names if n in NAMED_ONLY]
        if not only:
            assert "when named" not in rest, f"{names}: in the default selection, yet {row[:60]}"
        elif len(only) == len(names):
            assert "when named" in rest, f"{names}: named-only, yet the row does not say so"
        else:  # a row of several adapters, some of them named-only: each said by name
            for name in only:
                assert f"`{name}` runs when named" in rest, f"{name}: named-only, not said"
    assert len(rows) >= 20
    # the one adapter without a row of its own is in docs/quantization.md's table
    assert set(ADAPTERS) - checked == {"onnxruntime-dynamic-int8-full-range"}
    assert NAMED_ONLY & checked == NAMED_ONLY - {"onnxruntime-dynamic-int8-full-range"}


STAYS = re.compile(r"((?:`[a-z0-9-]+`(?:, | and |, and )?)+) stays? in the default selection")


def test_no_doc_keeps_a_named_only_adapter_in_the_default_selection():
    said = [(doc.name, name) for doc in DOCS
            for m in STAYS.finditer(" ".join(doc.read_text(encoding="utf-8").split()))
            for name in re.findall(r"`([^`]+)`", m[1])]
    assert said, "docs/deployment.md says which cheap adapters stay in the default selection"
    assert [(doc, name) for doc, name in said if name in NAMED_ONLY] == []
    assert STAYS.search("`keras3-torch` and `mlx` stay in the default selection")
