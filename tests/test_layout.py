"""The layout tells the architecture: no import circle inside a top-level package (analytical, deepflow,
surrogates: any module to any module of the same one, across its sub-packages; imports inside functions
count: a lazy import only hides a circle), every imported name exists where it is imported from, at
most 12 modules in a package folder, no module over 450 lines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("analytical", "deepflow", "surrogates")
MAX_MODULES, MAX_LINES = 12, 450


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """`(module, names)` of every absolute import in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def top_level(module: str) -> str:
    return module.partition(".")[0]


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the SAME top-level package it imports, in any of its folders
    (`from pkg import mod` and `from pkg import name` of the package's __init__ count; the parent
    packages Python imports on the way to a module do not: only what the code names)."""
    graph = {m: set() for m in mods}
    for module, path in mods.items():
        for target, names in imports_of(path):
            candidates = [target] + [f"{target}.{n}" for n in names]
            for c in candidates:
                if c in mods and c != module and top_level(c) == top_level(module) and not (
                        mods[c].name == "__init__.py" and c == target and any(f"{target}.{n}" in mods for n in names)):
                    graph[module].add(c)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_inside_a_top_level_package():
    found = cycle(edges(modules()))
    assert found is None, " -> ".join(found)


def test_the_circle_check_follows_imports_across_sub_packages():
    """An import from one folder into another of the same package is an edge (analytical/specs.py ->
    analytical/chip/technology.py -> analytical/specs.py went unseen while only one folder counted),
    and so is one inside a function; another top-level package's never is."""
    graph = edges(modules())
    assert "analytical.chip.technology" in graph["analytical.specs"]
    assert "deepflow.scale.executor" in graph["deepflow.run.job"]  # imported inside a function
    assert not any(top_level(t) != top_level(m) for m, targets in graph.items() for t in targets)


# deepflow's floors, top down: an import from one of them may only point at a lower one (or stay inside its own)
FLOORS = ("deepflow.commands", "deepflow.launch", "deepflow.run", "deepflow.scale")


def test_deepflow_floors_import_only_downwards():
    """The commands launch through Hydra (launch: hydra_app, sweep_runs), which runs the optimization (run), which
    hands large batches to Ray (scale: executor, shards); none of them imports a floor above it."""
    def floor(module: str) -> int | None:
        return next((i for i, f in enumerate(FLOORS) if module == f or module.startswith(f + ".")), None)

    up = [f"{m} -> {t}" for m, targets in edges(modules()).items() for t in targets
          if floor(m) is not None and floor(t) is not None and floor(t) < floor(m)]
    assert not up, up


def test_the_circle_check_finds_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_every_imported_name_exists_where_it_is_imported_from():
    for module, path in modules().items():
        for target, names in imports_of(path):
            if not target.startswith(PACKAGES):
                continue
            imported = importlib.import_module(target)
            for name in names:
                assert hasattr(imported, name) or importlib.util.find_spec(f"{target}.{name}") is not None, \
                    f"{module}: from {target} import {name}"


@pytest.mark.parametrize("package", sorted({str(p.parent.relative_to(ROOT)) for p in modules().values()}))
def test_a_package_folder_holds_at_most_12_modules(package):
    count = len([p for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"])
    assert count <= MAX_MODULES, f"{package}: {count} modules"


def test_no_module_over_450_lines():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long
