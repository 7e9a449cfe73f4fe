"""docs/api.md runs as written: its ```python blocks, in order, in one namespace, in an empty
folder. Breaking an example (or the API it shows) fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def test_the_extraction_finds_every_block() -> None:
    text = "a\n```python\nx = 1\n```\nb\n```yaml\nk: v\n```\n```python\ny = x\n```\n"
    assert blocks(text) == ["x = 1\n", "y = x\n"]


def test_every_python_example_of_docs_api_md_runs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    found = blocks(DOC.read_text(encoding="utf-8"))
    assert len(found) >= 5, "docs/api.md lost its examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for number, code in enumerate(found, 1):
        # compiled under its block number, so a failure's traceback says which example broke
        exec(compile(code, f"docs/api.md, python block {number}", "exec"), namespace)
