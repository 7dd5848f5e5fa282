"""The layout's rules (docs/architecture.md), checked on the source: imports flow one way.

Every import counts, module-level and inside functions, so a cycle cannot hide in a
function body. The doc is the rule: its room table's "may import" column must equal
``ALLOWED``, and every library module must be named in its room's row (``name.py``,
`` `name` ``, or a folder ``folder/`` that holds it), so a module added without its line in
the map fails here.
"""

from __future__ import annotations

import ast
import re
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
    "jobcast.cli": {"fleet", "jobcast.service", "jobcast.mlops", "jobcast.instrument"},
}
MAX_LINES = 600
DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\| `(?P<room>[a-z/]+)/` \| (?P<owns>.*) \| (?P<may>.*) \|$")


def _doc_rows() -> dict[str, tuple[str, str]]:
    """The room table of docs/architecture.md: room -> (owns, may import)."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if m := ROW.match(line):
            rows[m["room"].replace("/", ".")] = (m["owns"], m["may"])
    return rows


def _doc_allowed(may: str, rooms: set[str]) -> set[str]:
    """The rooms a "may import" cell names: backticked room names ("the above": the four
    library rooms)."""
    named = set(re.findall(r"`([a-z.]+)`", may))
    if "the above" in may:
        named |= {"fleet", "ingest", "models", "layerwise"}
    return named & rooms


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


def test_the_doc_table_is_the_rule():
    rows = _doc_rows()
    assert set(rows) == set(ALLOWED)
    for room, (_, may) in rows.items():
        allowed = _doc_allowed(may.split("(never")[0], set(ALLOWED) - {room})
        assert allowed == ALLOWED[room], (room, may)


def _named_in(row: str, inner: tuple[str, ...]) -> bool:
    stem = Path(inner[-1]).stem
    if stem == "__init__" and len(inner) == 1:
        return True
    if re.search(rf"(?<![A-Za-z0-9_]){re.escape(stem)}\.py", row) or f"`{stem}`" in row:
        return True
    return any(f"{folder}/" in row for folder in inner[:-1])


def test_every_library_module_is_named_in_its_room_row():
    rows = _doc_rows()
    missing = []
    for name, path in _sources().items():
        room = _room(name)
        if room not in rows:  # jobcast/__init__, jobcast/__main__
            continue
        parts = path.relative_to(ROOT).parts
        inner = parts[2:] if room.startswith("jobcast.") else parts[1:]
        if not _named_in(rows[room][0], inner):
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, "modules missing from docs/architecture.md's room table:\n" + \
        "\n".join(missing)


def test_the_doc_check_fails_on_a_module_it_does_not_name():
    row = "the pipeline (`pipeline.py`), parsers (`parsers/`), `wire`"
    assert _named_in(row, ("pipeline.py",)) and _named_in(row, ("parsers", "x.py"))
    assert _named_in(row, ("parsers", "wire.py")) and _named_in(row, ("__init__.py",))
    assert not _named_in(row, ("parallel.py",))
    assert not _named_in(row, ("line.py",))  # not a part of another name
