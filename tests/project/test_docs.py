"""The documentation in docs/ stays true to the code: generated tables up to date, links that
resolve, the case-file example valid, and no citations of notes outside the repository."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from harness.cases import load_cases
from harness.names import check_case_adapters

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_layouts", DOCS / "gen_layouts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_layout_tables_are_up_to_date() -> None:
    gen = _generator()
    text = (DOCS / "layouts.md").read_text(encoding="utf-8")
    blocks = gen.BLOCK.findall(text)
    assert {m[1] for m in blocks} == set(gen.CASES), "a layout's generated block is missing"
    assert gen.regenerate(text) == text, "docs/layouts.md is stale: run python docs/gen_layouts.py"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_case_file_example_is_valid(tmp_path: Path) -> None:
    text = (DOCS / "cases.md").read_text(encoding="utf-8")
    example = re.search(r"```yaml\n(.*?)```", text, flags=re.S).group(1)
    path = tmp_path / "example.yaml"
    path.write_text(example, encoding="utf-8")
    cases = load_cases(path)
    assert [c.name for c in cases] == ["my-model-h16", "my-model-h32"]
    check_case_adapters(cases)  # the adapter names it refers to, as run checks them


def _repository_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]


def test_no_citations_of_notes_outside_the_repository() -> None:
    # spelled in pieces, so this file does not cite them itself
    banned = [b"../" + b"shared", b"DESIGN" + b".md", b"LAYOUTS" + b".md"]
    hits = [f"{p.relative_to(ROOT)}: {b.decode()}" for p in _repository_files()
            for b in banned if b in p.read_bytes()]
    assert not hits, "\n".join(hits)


# "41 cases": a count of what the repository holds, stale once a case is added (issue 32). A
# limit ("at most 10 000 cases") is not one.
COUNT = re.compile(r"\b(?<![\d,])(?<!\d )(?<!at most )\d{1,3}(?:[ ,]?\d{3})*\s+"
                   r"(?:bundled\s+|forward\s+|CPU\s+|GPU\s+)?"
                   r"(?:cases|case files|adapters|layouts)\b")


def test_no_hard_coded_counts_of_cases_adapters_or_layouts() -> None:
    hits = [f"{doc.relative_to(ROOT)}: {m.group(0)!r}" for doc in MARKDOWN
            for m in COUNT.finditer(doc.read_text(encoding="utf-8"))]
    assert not hits, "say 'every bundled case' (or generate the number): " + "; ".join(hits)
    assert COUNT.search("the CPU suite (`run cases`, 41\ncases;")
    assert not COUNT.search("a matrix expands to at most 10 000 cases")
    assert not COUNT.search("the float16 cases")
