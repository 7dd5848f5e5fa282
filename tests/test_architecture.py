"""The layout's rules (docs/architecture.md), checked on the source: imports flow one way.

Every import counts, module-level and inside functions, so a cycle cannot hide in a
function body.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fleet", "ingest", "models", "layerwise", "jobcast")
# room -> rooms it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "fleet": set(),
    "ingest": {"fleet"},
    "layerwise": {"fleet"},
    "models": {"fleet", "ingest"},
    "jobcast.instrument": {"fleet", "ingest"},
    "jobcast.service": {"fleet", "ingest", "models", "layerwise"},
    "jobcast.mlops": {"fleet", "ingest", "models", "layerwise", "jobcast.service"},
    "jobcast.cli": {"fleet", "ingest", "models", "layerwise", "jobcast.service",
                    "jobcast.mlops", "jobcast.instrument"},
}
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
    }


def _imports(name: str, path: Path) -> set[str]:
    """Project modules imported anywhere in the file (absolute and relative)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The project module an import names (``a.b.func`` -> ``a.b``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    modules = _sources()
    graph = {}
    for name, path in modules.items():
        targets = {_resolve(t, modules) for t in _imports(name, path)}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def _room(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "jobcast" and len(parts) > 1 and f"jobcast.{parts[1]}" in ALLOWED:
        return f"jobcast.{parts[1]}"
    return parts[0]


def test_rooms_import_only_what_they_may():
    bad = []
    for module, targets in _graph().items():
        room = _room(module)
        if room not in ALLOWED:  # jobcast/__init__, jobcast/__main__
            continue
        for target in targets:
            other = _room(target)
            if other != room and other not in ALLOWED[room]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports against docs/architecture.md:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_nothing_imports_the_cli():
    users = sorted(
        module
        for module, targets in _graph().items()
        if not module.startswith(("jobcast.cli", "jobcast.__main__"))
        and any(t.startswith("jobcast.cli") for t in targets)
    )
    assert not users


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small(package):
    big = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / package).rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_the_checker_sees_function_local_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from jobcast.cli.app import main\n    return main\n")
    assert "jobcast.cli.app" in _imports("ingest.m", source)
