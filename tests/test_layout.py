"""The layout rules a contributor can rely on, checked on the source tree: no import cycles, no
module over 500 lines, no function over 150 lines but a documented top-to-bottom algorithm
loop (command-line parsing staying in ``worldsim.commands`` is test_cli.py's)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Where each part of the ``worldsim`` package lives (pyproject.toml's package-dir).
PACKAGES = {"worldsim": ROOT / "worldsim", "worldsim.envs": ROOT / "envs",
            "worldsim.world_models": ROOT / "world_models", "worldsim.policies": ROOT / "policies",
            "worldsim.assets": ROOT / "assets"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 150
# A longer function must say in its docstring that it is an algorithm loop read top to bottom.
LOOP_MARK = "top to bottom"


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def imports(path: Path) -> set[str]:
    """The package modules ``path`` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name in MODULES}


def test_the_import_graph_has_no_cycles():
    graph = {}
    for name, path in MODULES.items():
        edges = imports(path) - {name}
        if path.name == "__init__.py":  # a package gathering its own modules is not a cycle
            edges = {e for e in edges if not e.startswith(name + ".")}
        graph[name] = edges
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_stay_small(name):
    path = MODULES[name]
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{path} has {len(source.splitlines())} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                assert LOOP_MARK in (ast.get_docstring(node) or ""), (
                    f"{path}:{node.lineno} {node.name} has {length} lines; split it, or document it as an "
                    f"algorithm loop read {LOOP_MARK}")
