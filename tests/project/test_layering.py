"""The package's layering: no import cycle among ``harness`` modules, counting imports inside
functions; the case model imports nothing of the adapters or layouts, the case files nothing of
the adapters; an adapter file imports no other adapter file, only the adapter base, the helper
modules (``harness/adapters/_*.py``) and the framework toolkit (``harness/frameworks/``), which
sits below the adapters and the tools; nothing outside ``harness/adapters/`` imports a helper
module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import harness

ROOT = Path(harness.__file__).parent


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the package (packages by their __init__)."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its file (top level, functions,
    ``TYPE_CHECKING`` blocks): ``from a.b import c`` is a.b.c if that is a module, else a.b."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
        resolved = set()
        for target in targets:
            while target and target not in modules:  # harness.x.y.Name -> harness.x.y
                target = target.rpartition(".")[0]
            if target and target != name:
                resolved.add(target)
        graph[name] = resolved
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


GRAPH = _imports(_modules())
REPO = Path(__file__).resolve().parents[2]


def test_the_analysis_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_analysis_sees_imports_inside_functions() -> None:
    assert "harness.cases" in GRAPH["harness.cli.run"]  # run imports its modules lazily


def _room(module: str) -> str:
    """The top-level room of ``module``: its folder directly under harness/ (harness.models for
    harness.models.judges.shipped), else its own file (harness.runner); the package's
    __init__ is a room of its own."""
    return ".".join(module.split(".")[:2])


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The room-level graph of a module graph: room -> the other rooms its modules import."""
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        rooms.setdefault(_room(module), set()).update(
            _room(t) for t in targets if _room(t) != _room(module))
    return rooms


def test_the_room_analysis_finds_a_cycle_through_folders() -> None:
    # two modules deep in two folders, each importing the other folder: a cycle of rooms that
    # no module-level cycle shows
    planted = {"harness.models.tflite_run": {"harness.adapters.base"},
               "harness.adapters.litert_shipped": {"harness.models.judges.shipped"},
               "harness.models.judges.shipped": set(), "harness.adapters.base": set(),
               "harness.runner": {"harness.adapters.base"}}
    assert _cycles(planted) == []
    assert _rooms(planted) == {"harness.models": {"harness.adapters"},
                               "harness.adapters": {"harness.models"}, "harness.runner":
                               {"harness.adapters"}}
    assert _cycles(_rooms(planted)) == [["harness.adapters", "harness.models"]]


def test_no_cycle_among_the_top_level_rooms() -> None:
    """Each file directly under harness/ and each folder under it is one room; the rooms'
    imports (anywhere in a file) run one way: no room reaches back to one that imports it."""
    rooms = _rooms(GRAPH)
    assert {"harness.models", "harness.adapters", "harness.runner"} <= set(rooms)
    assert "harness.adapters" in rooms["harness.models"]
    cycles = _cycles(rooms)
    assert not cycles, "room cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


# Left to the rewrite of harness/reference/ in progress: backward.py imports reversal_index from
# the package, whose __init__ imports backward. Each entry must still be found (then delete it).
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_in_harness() -> None:
    cycles = _cycles(GRAPH)
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycles: " + "; ".join(" <-> ".join(c) for c in new)
    gone = [c for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"no longer a cycle, delete it from KNOWN_CYCLES: {gone}"


def test_the_case_model_imports_no_adapter_or_layout() -> None:
    bad = {m for m in GRAPH["harness.spec"]
           if m.startswith(("harness.adapters", "harness.layouts"))}
    assert not bad


def test_the_case_files_reach_no_adapter() -> None:
    """Case files are read and validated below the adapters; the adapter names a case refers to
    are checked above both (harness.names.check_case_adapters, called by the plan)."""
    for loader in ("harness.cases", "harness.case_yaml", "harness.case_validation"):
        assert not {m for m in _reach(loader) if _within(m, ("harness.adapters",))}, loader
    assert "harness.names" in GRAPH["harness.plan"]


# Left to the rewrite of the reference adapters in progress (same rule as KNOWN_CYCLES).
KNOWN_ADAPTER_IMPORTS: set[tuple[str, str]] = set()


def test_adapters_import_no_other_adapter() -> None:
    adapters = {m for m in GRAPH if m.startswith("harness.adapters.")
                and not m.rpartition(".")[2].startswith("_") and m != "harness.adapters.base"}
    assert {"harness.adapters.torch_cpu", "harness.adapters.torch_cudnn"} <= adapters
    found = {(a, b) for a in adapters for b in GRAPH[a] & adapters}
    assert not found - KNOWN_ADAPTER_IMPORTS, sorted(found - KNOWN_ADAPTER_IMPORTS)
    gone = KNOWN_ADAPTER_IMPORTS - found
    assert not gone, f"no longer imported, delete it from KNOWN_ADAPTER_IMPORTS: {gone}"


# above the framework toolkit: what may use it, never the reverse
ABOVE_THE_TOOLKIT = ("harness.adapters", "harness.judges", "harness.models", "harness.reference",
                     "harness.repro", "harness.quantization", "harness.runner", "harness.convert",
                     "harness.api", "harness.cli", "harness.doctor")


def test_adapters_import_the_framework_toolkit_and_it_imports_none_of_them() -> None:
    toolkit = [m for m in GRAPH if _within(m, ("harness.frameworks",))]
    assert {"harness.frameworks.onnx", "harness.frameworks.litert_flatbuffer"} <= set(toolkit)
    assert "harness.frameworks.onnx" in GRAPH["harness.adapters.onnxruntime"]
    bad = {m: sorted(t for t in _reach(m) if _within(t, ABOVE_THE_TOOLKIT)) for m in toolkit}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the framework toolkit imports what sits above it: {bad}"


def _private_adapter_imports(path: Path, module: str) -> list[str]:
    """``file:line module`` of every import of a ``harness.adapters._*`` module or name in
    ``path`` (the module ``module``), relative imports resolved against its package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [f"{path}:{node.lineno} {n}" for n in names
                  if n.startswith("harness.adapters._")]
    return found


# The adapters' own tests test their helpers (tests/adapters/test_adapter_tf.py tests
# harness.adapters._tf.reverse_within_lengths): they sit beside the adapters, not above them.
ADAPTER_TESTS = "tests/adapters"


def _outside_the_adapters(repo: Path) -> list[str]:
    """The imports of helper modules (``harness/adapters/_*.py``) from every file of harness/,
    tests/ and benchmarks/ under ``repo`` outside harness/adapters/ and the adapters' tests."""
    found = []
    for top in ("harness", "tests", "benchmarks"):
        for path in sorted((repo / top).rglob("*.py")):
            rel = path.relative_to(repo).as_posix()
            if rel.startswith(("harness/adapters/", ADAPTER_TESTS + "/")):
                continue
            parts = list(path.relative_to(repo).with_suffix("").parts)
            found += _private_adapter_imports(path, ".".join(parts))
    return found


def test_nothing_outside_the_adapters_imports_an_adapter_helper(tmp_path: Path) -> None:
    assert _outside_the_adapters(REPO) == []
    # planted: an absolute and a relative import, outside the adapters, are each found
    for top in ("harness/adapters", "harness/judges", "tests", "benchmarks"):
        (tmp_path / top).mkdir(parents=True)
    (tmp_path / "harness/adapters/_keras.py").write_text("from . import _tf\n")
    (tmp_path / "harness/judges/planted.py").write_text(
        "def f():\n    from ..adapters._keras import run_stack\n")
    (tmp_path / "benchmarks/planted.py").write_text("import harness.adapters._onnx\n")
    assert _outside_the_adapters(tmp_path) == [
        f"{tmp_path}/harness/judges/planted.py:2 harness.adapters._keras.run_stack",
        f"{tmp_path}/benchmarks/planted.py:1 harness.adapters._onnx"]


# The run (its core) and the tools beside it: a diagnosis may use the run, never the reverse.
RUN_CORE = ("harness.runner", "harness.pairs", "harness.case_jobs", "harness.blind",
            "harness.prepare", "harness.compare", "harness.isolation", "harness.report")
TOOLS = ("harness.doctor", "harness.convert", "harness.probe", "harness.bisect",
         "harness.release_envs", "harness.models")
# compare's judges (docs/judges.md): judges of compare's pairings, named by compare, beside it in
# harness/models/judges/ and reached by no part of the run
COMPARE_JUDGES = ("harness.models.judges.pairing", "harness.models.judges.weights",
                  "harness.models.judges.shipped")
MISTAKE_ENGINE = ("harness.mistakes",)


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reach(module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for nxt in GRAPH[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_run_core_imports_no_tool() -> None:
    core = [m for m in GRAPH if _within(m, RUN_CORE)]
    assert {"harness.runner", "harness.blind", "harness.report.html"} <= set(core)
    bad = {m: sorted(t for t in _reach(m) if _within(t, TOOLS)) for m in core}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the run core reaches a tool: {bad}"


def test_the_run_reaches_no_compare_judge() -> None:
    core = [m for m in GRAPH if _within(m, RUN_CORE)] + ["harness.judges"]
    assert set(COMPARE_JUDGES) <= set(GRAPH)
    bad = {m: sorted(t for t in _reach(m) if _within(t, COMPARE_JUDGES)) for m in core}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the run reaches compare's judges: {bad}"
    assert set(COMPARE_JUDGES[1:]) <= GRAPH["harness.models.comparison"]


def test_the_mistake_engine_sits_below_the_run_and_the_tools() -> None:
    engine = [m for m in GRAPH if _within(m, MISTAKE_ENGINE)]
    assert "harness.mistakes.scoring" in engine
    above = ("harness.runner", "harness.pairs", "harness.case_jobs", "harness.blind",
             "harness.isolation", "harness.report", "harness.prepare") + TOOLS
    bad = {m: sorted(t for t in _reach(m) if _within(t, above)) for m in engine}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the mistake engine imports what sits above it: {bad}"
    assert "harness.mistakes" in GRAPH["harness.blind"] or any(
        _within(t, MISTAKE_ENGINE) for t in GRAPH["harness.blind"])


def test_the_format_readers_sit_below_the_run_core() -> None:
    readers = [m for m in GRAPH if _within(m, ("harness.readers",))]
    assert readers
    above = RUN_CORE + TOOLS + ("harness.adapters",)
    bad = {m: sorted(t for t in _reach(m) if _within(t, above)) for m in readers}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"a format reader imports what sits above it: {bad}"


def test_the_run_core_shows_nothing_itself() -> None:
    """The run core tells its events to a listener; the terminal display (harness.progress)
    and the command line (harness.cli) sit above it."""
    core = [m for m in GRAPH if _within(m, RUN_CORE)]
    shown = ("harness.progress", "harness.cli")
    bad = {m: sorted(t for t in _reach(m) if _within(t, shown)) for m in core}
    bad = {m: t for m, t in bad.items() if t}
    assert not bad, f"the run core imports the display or the command line: {bad}"


# The front doors: each turns its own arguments into a harness.plan.Request; the plan decides
# what runs, below every door and above the registry.
DOORS = ("harness.cli.run", "harness.api.check", "harness.pytest_plugin.options")


def test_one_plan_below_the_three_front_doors() -> None:
    assert all("harness.plan" in GRAPH[door] for door in DOORS)
    above = ("harness.cli", "harness.api", "harness.pytest_plugin", "harness.runner",
             "harness.pairs", "harness.case_jobs", "harness.report", "harness.progress")
    bad = sorted(t for t in _reach("harness.plan") if _within(t, above))
    assert not bad, f"the plan imports what sits above it: {bad}"
    # no door decides the selection itself
    for door in DOORS:
        text = _modules()[door].read_text(encoding="utf-8")
        assert "select(" not in text and "named_explicitly" not in text, door
