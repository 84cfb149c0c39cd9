"""The layering rule of docs/architecture.md, read from the source: which package may
import which, and no import circles in ``polling`` or ``scheduling``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each app's packages (and a few top modules), lowest first: a part imports only parts
# of a lower rank. BASE modules (the app's own: models, settings, errors, pure helpers)
# may be imported by any part and import no package, but for models registering the
# model modules of its packages.
RANKS = {
    "polling": {
        "common": 0,
        "ownership": 1,
        "dispatch": 2,
        "flow": 3,
        "upkeep": 3,
        "reading": 4,
        "writing": 4,
        "engine": 5,
        "console": 6,
        "admin": 7,
        "management": 7,  # its commands may call the console's operator actions
    },
    "scheduling": {
        "sharding": 0,
        "storage": 1,
        "teams": 1,
        "flow": 2,
        "jobs": 3,
        "schedules": 4,
        "topics": 4,
        "api": 5,
        "console": 5,
        "tasks": 5,
        "admin": 6,
        "apps": 6,
        "management": 6,
    },
}
BASE = {
    "polling": {"models", "conf", "metrics", "apps"},
    "scheduling": {
        "choices",
        "keys",
        "conf",
        "errors",
        "netguard",
        "handlers",
        "tracing",
        "metrics",
        "models",
        "sealing",
    },
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str) -> dict[str, Path]:
    return {
        _module_name(p): p
        for p in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in p.parts
    }


def _imports(path: Path, module: str) -> set[str]:
    """Every project module ``path`` imports (at any depth, lazy ones too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in {"polling", "scheduling"}}


def _graph(*packages: str) -> dict[str, set[str]]:
    modules: dict[str, Path] = {}
    for package in packages:
        modules.update(_sources(package))
    graph = {}
    for name, path in modules.items():
        # "from polling.reading import take" names the module polling.reading.take.
        graph[name] = {m for m in _imports(path, name) if m in modules and m != name}
    return graph


def _rank(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None
    app, head = parts[0], parts[1]
    if head in BASE[app]:
        return -1
    return RANKS[app].get(head)


@pytest.mark.parametrize("app", ["polling", "scheduling"])
def test_every_part_has_a_rank(app: str) -> None:
    folder = ROOT / app
    parts = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    parts |= {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert parts - {"migrations"} == set(RANKS[app]) | BASE[app]


@pytest.mark.parametrize("app", ["polling", "scheduling"])
def test_lower_parts_never_import_higher_ones(app: str) -> None:
    wrong = []
    for module, imported in _graph(app).items():
        mine = _rank(module)
        for other in imported:
            theirs = _rank(other)
            if mine is None or theirs is None:
                continue
            same_part = module.split(".")[1] == other.split(".")[1]
            registers = module == f"{app}.models" and other.endswith(".models")
            both_base = mine == theirs == -1  # base modules among themselves
            if not (same_part or registers or both_base) and theirs >= mine:
                wrong.append(f"{module} -> {other}")
    assert not wrong, "imports against the layering (docs/architecture.md):\n" + "\n".join(wrong)


def test_scheduling_never_imports_polling() -> None:
    sources = _sources("scheduling")
    wrong = [
        f"{module} -> {other}"
        for module, path in sources.items()
        for other in _imports(path, module)
        if other.startswith("polling")
    ]
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("app", ["polling", "scheduling"])
def test_no_import_circles(app: str) -> None:
    graph = _graph(app)
    # A package's __init__ importing its own modules is not a circle of concern.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert not _cycles(graph)


def test_the_circle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
