"""The layering rule of docs/architecture.md, read from the source: which package may
import which, and no import circles in ``polling`` or ``scheduling``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# polling's packages, lowest first: a package imports only packages of a lower rank
# (and the app's own modules: models, conf, metrics).
POLLING_RANKS = {
    "common": 0,
    "ownership": 1,
    "dispatch": 2,
    "flow": 3,
    "upkeep": 3,
    "reading": 4,
    "writing": 4,
    "engine": 5,
    "console": 6,
    "management": 7,  # its commands may call the console's operator actions
}
APP_BASE = {"models", "conf", "metrics", "apps"}  # anyone may import these; they import no package
APP_TOP = {"admin"}  # may import anything


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
    head = parts[1]
    if head in APP_BASE:
        return -1
    if head in APP_TOP:
        return 99
    return POLLING_RANKS.get(head)


def test_every_polling_package_has_a_rank() -> None:
    packages = {p.name for p in (ROOT / "polling").iterdir() if (p / "__init__.py").exists()}
    assert packages - {"migrations"} == set(POLLING_RANKS)
    top = {p.stem for p in (ROOT / "polling").glob("*.py")} - {"__init__"}
    assert top <= APP_BASE | APP_TOP, f"only the app's own modules at the top: {top}"


def test_lower_packages_never_import_higher_ones() -> None:
    wrong = []
    for module, imported in _graph("polling").items():
        mine = _rank(module)
        for other in imported:
            theirs = _rank(other)
            if mine is None or theirs is None:
                continue
            same_package = module.split(".")[1] == other.split(".")[1]
            if theirs > mine or (theirs == mine and not same_package):
                wrong.append(f"{module} -> {other}")
    assert not wrong, "imports against the layering (docs/architecture.md):\n" + "\n".join(wrong)


def test_scheduling_never_imports_polling() -> None:
    wrong = [
        f"{module} -> {other}"
        for module, imported in _graph("scheduling").items()
        for other in _imports(_sources("scheduling")[module], module)
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


@pytest.mark.parametrize("package", ["polling"])
def test_no_import_circles(package: str) -> None:
    graph = _graph(package)
    # A package's __init__ importing its own modules is not a circle of concern.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert not _cycles(graph)


def test_the_circle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
