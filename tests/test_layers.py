"""The package's shape: imports point down the layers of docs/architecture.md, with no circle
anywhere (an import in a function body or under ``TYPE_CHECKING`` counts), and no module grows
past 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "listsync"

#: The layers from the bottom up; a module may import its own layer's modules and those below.
LAYERS = [
    {
        "listsync",
        "listsync.errors",
        "listsync.files",
        "listsync.progress",
        "listsync.lazy",
        "listsync.assets",
    },
    {"listsync.client"},
    {"listsync.extract"},
    {"listsync.sync", "listsync.signals"},
    {"listsync.hooks", "listsync.triggers"},
    {"listsync.operators", "listsync.commands", "listsync.cli", "listsync.notifications"},
]
#: Side by side in one layer, yet neither imports the other.
APART = [("listsync.sync", "listsync.signals")]
#: Implements the spec on its own, so contract tests catch a misreading instead of sharing it.
EMULATOR = "listsync.emulator"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """Every ``listsync`` module ``path`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module.split(".")[0] == "listsync"}


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: _imports(path, name) & paths.keys() - {name} for name, path in paths.items()}


def _layer(module: str) -> tuple[int, str]:
    for level, names in enumerate(LAYERS):
        owner = next(
            (n for n in names if module == n or (n != "listsync" and module.startswith(n + "."))), None
        )
        if owner is not None:
            return level, owner
    raise AssertionError(f"{module} is in no layer of this test; add its package to LAYERS")


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_anywhere() -> None:
    assert _cycle(_graph()) is None


def test_imports_point_down_the_layers() -> None:
    upward = []
    for module, targets in _graph().items():
        if module.startswith(EMULATOR):
            continue
        level, owner = _layer(module)
        for target in targets:
            if target.startswith(EMULATOR):
                continue
            target_level, target_owner = _layer(target)
            sideways = (owner, target_owner) in APART or (target_owner, owner) in APART
            if target_level > level or sideways:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_emulator_implements_the_spec_on_its_own() -> None:
    graph = _graph()
    borrowed = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith(EMULATOR)
        for target in targets
        if not target.startswith(EMULATOR) and _layer(target)[0] > 0
    )
    assert borrowed == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=_module_name)
def test_no_module_grows_past_600_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_the_checks_see_a_circle_and_an_upward_import() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _layer("listsync.client.writers")[0] < _layer("listsync.sync.people.apply")[0]
