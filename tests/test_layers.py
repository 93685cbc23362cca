"""Imports only go down: protocols → participant → aggregator (estimation → store → service →
operator) → sim → bench, ldpnb (the names users import, gathered) above sim, the shuffler beside
the aggregator on participant alone, and no two modules import each other, directly or round a
circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Each layer, and the layers below it that it may import.
LAYERS = [
    "protocols",
    "participant",
    "aggregator.estimation",
    "aggregator.store",
    "aggregator.service",
    "aggregator.operator",
    "sim",
    "ldpnb",
]
PACKAGES = ("protocols", "participant", "aggregator", "sim", "shuffler", "ldpnb")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The modules of this project ``path`` imports, anywhere in it (lazy imports included)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return {f for f in found if f.split(".")[0] in PACKAGES}


def layer_of(name: str) -> int | None:
    for i in reversed(range(len(LAYERS))):
        if name == LAYERS[i] or name.startswith(LAYERS[i] + "."):
            return i
    return None


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def test_imports_only_go_down():
    upward = []
    for name, path in project_modules().items():
        own = layer_of(name)
        if own is None:  # aggregator/__init__ and __main__: the package's face, above its parts
            continue
        for target in imports(path):
            other = layer_of(target)
            if other is not None and other > own:
                upward.append(f"{name} imports {target}")
    assert not upward, upward


def test_the_shuffler_imports_only_what_a_device_has():
    """The shuffler is another party's service: it reads specs and sealed lengths (participant,
    protocols) and nothing of the aggregator, the simulator or the benchmarks."""
    modules = project_modules()
    reached = {t.split(".")[0] for name, path in modules.items() if name.startswith("shuffler") for t in imports(path)}
    assert reached <= {"shuffler", "participant", "protocols"}, reached


def test_no_module_imports_another_that_imports_it_back():
    modules = project_modules()
    graph = {name: {t for t in imports(path) if t in modules and t != name} for name, path in modules.items()}
    # Packages' __init__ modules re-export their parts; a cycle through one is not a real one.
    graph = {n: {t for t in targets if modules[t].name != "__init__.py"} for n, targets in graph.items()}
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in graph[node]:
            if state.get(target) == 1:
                cycles.append(" -> ".join(trail[trail.index(target):] + [target]) if target in trail else target)
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles
