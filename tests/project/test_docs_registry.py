"""The docs say what the adapter registry says about the default selection: the named-only
adapters (:attr:`harness.adapters.Adapter.named_only`) are one generated list wherever the docs
list them (docs/gen_named_only.py), docs/adapters.md's table is generated from the registry
(docs/gen_adapters.py: each adapter's device and selection), and no doc keeps one "in the
default selection"."""

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


def _table_generator():
    spec = importlib.util.spec_from_file_location("gen_adapters", ROOT / "docs" / "gen_adapters.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_adapter_table_is_the_registrys(capsys):
    """docs/adapters.md's table: a row per family, every registered adapter in one, its device
    and selection as the registry says (docs/gen_adapters.py --check)."""
    gen = _table_generator()
    assert gen.main(["--check"]) == 0, capsys.readouterr().out
    text = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    rows = gen._rows(gen.BLOCK.search(text)["body"])
    named = [n for names, _ in rows for n in names]
    assert sorted(named) == sorted(ADAPTERS) and len(rows) >= 20
    for names, said in rows:
        assert said and said != gen.UNDESCRIBED, names


def test_the_table_check_sees_a_changed_registry(monkeypatch, capsys):
    """A planted change of the registry (an adapter moved out of the default selection, one
    added) makes ``--check`` fail, naming the file."""
    gen = _table_generator()
    monkeypatch.setattr(ADAPTERS["mlx"], "named_only", "planted: a compile per case")
    assert gen.main(["--check"]) == 1
    assert "out of date: docs/adapters.md" in capsys.readouterr().out
    text = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    assert "| `mlx` | CPU | when named |" in gen.regenerate(text)
    monkeypatch.undo()
    monkeypatch.setitem(ADAPTERS, "planted-new", ADAPTERS["mlx"])
    assert f"| `planted-new` | CPU | default | {gen.UNDESCRIBED} |" in gen.regenerate(text)


STAYS = re.compile(r"((?:`[a-z0-9-]+`(?:, | and |, and )?)+) stays? in the default selection")


def test_no_doc_keeps_a_named_only_adapter_in_the_default_selection():
    said = [(doc.name, name) for doc in DOCS
            for m in STAYS.finditer(" ".join(doc.read_text(encoding="utf-8").split()))
            for name in re.findall(r"`([^`]+)`", m[1])]
    assert said, "docs/deployment.md says which cheap adapters stay in the default selection"
    assert [(doc, name) for doc, name in said if name in NAMED_ONLY] == []
    assert STAYS.search("`keras3-torch` and `mlx` stay in the default selection")


def test_the_versions_last_checked_are_said_and_kept_until_recorded(monkeypatch):
    """README.md and docs/adapters.md say which release of each adapter's framework was last
    checked, and when; a regeneration keeps the line (other installed versions do not make the
    docs stale), ``--record-versions`` writes the installed ones, and a framework an adapter
    newly requires makes it stale."""
    gen = _table_generator()
    for doc in (ROOT / "README.md", ROOT / "docs" / "adapters.md"):
        text = doc.read_text(encoding="utf-8")
        said = gen.CHECKED_SAYS.match(gen.CHECKED.search(text)["body"])
        assert said, doc
        assert [i.split(" ", 1)[0] for i in said["listed"].split(", ")] == gen.distributions()
        monkeypatch.setattr(gen.versions, "installed", lambda dist: "99.0")
        assert gen.regenerate_with(text, record=False) == text
        recorded = gen.CHECKED.search(gen.regenerate_with(text, record=True))["body"]
        assert "torch 99.0" in recorded and "(20" in recorded
        monkeypatch.setattr(gen, "distributions", lambda: ["planted-framework"])
        assert "planted-framework 99.0" in gen.regenerate_with(text, record=False)
        monkeypatch.undo()
