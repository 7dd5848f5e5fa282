"""The layout's rules (docs/architecture.md), checked on the source: imports flow one way.

Every import counts, module-level and inside functions, so a cycle cannot hide in a
function body. The doc is the rule: its room table's "may import" column must equal
``ALLOWED``, and every library module must be named in its room's section ("### `room/`":
``name.py``, `` `name` ``, or a folder ``folder/`` that holds it), so a module added without
its line in the map fails here. Beside that: the engine never imports the features, a step
is priced through one entry point, and no line of the map runs over 400 characters.
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


_LOADERS = {"spec_from_file_location", "run_path", "import_module", "SourceFileLoader",
            "exec_module", "sys.path.insert", "sys.path.append"}


def _call_name(call: ast.Call) -> str:
    """``a.b.c`` of a call ``a.b.c(...)``, the last names only where the chain is not names."""
    parts, func = [], call.func
    while isinstance(func, ast.Attribute):
        parts.insert(0, func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.insert(0, func.id)
    return ".".join(parts)


def _benchmark_uses(path: Path) -> list[str]:
    """Where ``path`` imports ``benchmarks`` or loads code from a file under benchmarks/ by
    path (a loader call or a sys.path change in a function or module that names the folder;
    reading a script's text, as a lint over every folder does, is not loading it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [f"{node.lineno}: imports benchmarks" for node in ast.walk(tree)
             if isinstance(node, ast.Import | ast.ImportFrom)
             and any((n or "").split(".")[0] == "benchmarks"
                     for n in ([a.name for a in node.names] if isinstance(node, ast.Import)
                               else [node.module]))]
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    top = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)]
    for scope in [*functions, *top]:
        nodes = list(ast.walk(scope))
        names_folder = any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                           and re.match(r"benchmarks(/|$)", n.value) for n in nodes)
        calls = [n for n in nodes if isinstance(n, ast.Call)
                 and any(_call_name(n).endswith(name) for name in _LOADERS)]
        if names_folder and calls:
            found.append(f"{calls[0].lineno}: loads code from benchmarks/ by path")
    return found


def test_nothing_loads_the_benchmarks():
    """The laboratory leans on the product, never the other way: no module of the library
    or the tests imports ``benchmarks`` or loads a script of benchmarks/ by path."""
    files = [p for folder in (*PACKAGES, "tests") for p in sorted((ROOT / folder).rglob("*.py"))
             if "data" not in p.relative_to(ROOT).parts]
    uses = {str(p.relative_to(ROOT)): u for p in files if (u := _benchmark_uses(p))}
    assert not uses


def test_the_benchmark_check_sees_a_load_by_path(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("import importlib.util\n\ndef f(root):\n    return importlib.util."
                      "spec_from_file_location('x', root / 'benchmarks' / 'x.py')\n")
    assert _benchmark_uses(script)
    script.write_text("from benchmarks.lib import md\n")
    assert _benchmark_uses(script)
    script.write_text("FOLDERS = ('benchmarks', 'fleet')\n")
    assert not _benchmark_uses(script)


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


def _doc_sections() -> dict[str, str]:
    """The "What each room holds" sections of docs/architecture.md: room -> its text."""
    text = DOC.read_text(encoding="utf-8").split("## What each room holds", 1)[1]
    text = text.split("\n## ", 1)[0]
    sections = {}
    for chunk in text.split("\n### `")[1:]:
        room, _, body = chunk.partition("/`")
        sections[room.replace("/", ".")] = body
    return sections


def test_every_library_module_is_named_in_its_room_section():
    sections = _doc_sections()
    assert set(sections) == set(ALLOWED)
    missing = []
    for name, path in _sources().items():
        room = _room(name)
        if room not in sections:  # jobcast/__init__, jobcast/__main__
            continue
        parts = path.relative_to(ROOT).parts
        inner = parts[2:] if room.startswith("jobcast.") else parts[1:]
        if not _named_in(sections[room], inner):
            missing.append(str(path.relative_to(ROOT)))
    assert not missing, "modules missing from docs/architecture.md's room sections:\n" + \
        "\n".join(missing)


def test_the_doc_check_fails_on_a_module_it_does_not_name():
    row = "the pipeline (`pipeline.py`), parsers (`parsers/`), `wire`"
    assert _named_in(row, ("pipeline.py",)) and _named_in(row, ("parsers", "x.py"))
    assert _named_in(row, ("parsers", "wire.py")) and _named_in(row, ("__init__.py",))
    assert not _named_in(row, ("parallel.py",))
    assert not _named_in(row, ("line.py",))  # not a part of another name


def _kind_uses(tree: ast.AST, kinds: set[str]) -> list[tuple[int, str]]:
    """Where a module writes a candidate kind as a kind: a ``kind=`` argument, a side of a
    comparison, or the value of a name that says ``kinds``."""
    def found(node: ast.AST | None) -> list[tuple[int, str]]:
        return [(c.lineno, c.value) for c in ast.walk(node) if isinstance(c, ast.Constant)
                and c.value in kinds] if node is not None else []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "kind":
            out += found(node.value)
        elif isinstance(node, ast.Compare):
            out += [hit for side in (node.left, *node.comparators) for hit in found(side)]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("kinds" in ast.unparse(t).lower() for t in targets):
                out += found(node.value)
    return out


def test_route_kinds_have_one_definition():
    """The candidate kinds of the registry's routes are written only where they are
    registered (``jobcast.service.engine.route_registry``); routes and readers use its names."""
    from jobcast.service.engine.route_registry import BUILT_IN_ROUTES
    home = ROOT / "jobcast" / "service" / "route_registry.py"
    kinds = {k for spec in BUILT_IN_ROUTES for k in spec.kinds}
    old = 'class R:\n    kinds = ("hybrid",)\nRelation(kind="layerwise")\nif k == "own-rate": pass'
    assert len(_kind_uses(ast.parse(old), kinds)) == 3  # the check sees the old spellings
    stray = [f"{path.relative_to(ROOT)}:{line}: {kind!r}" for path in _sources().values()
             if path != home
             for line, kind in _kind_uses(ast.parse(path.read_text(encoding="utf-8")), kinds)]
    assert not stray, "candidate kinds written outside the route registry:\n" + "\n".join(stray)


MAX_DOC_LINE = 400


def test_no_line_of_the_map_runs_on():
    long = [(i, len(line)) for i, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_DOC_LINE]
    assert not long, f"docs/architecture.md lines over {MAX_DOC_LINE} characters: {long}"


def test_the_engine_never_imports_the_features():
    bad = sorted(f"{module} -> {target}" for module, targets in _graph().items()
                 if module.startswith("jobcast.service.engine")
                 for target in targets if target.startswith("jobcast.service.features"))
    assert not bad, "\n".join(bad)


# The one pricing entry point: outside layerwise/pricing/ a module reaches the step formula
# and the row pricing only through ``price_network`` (and the array interface in ``model``);
# the composition's fit and the per-type path are the two named exceptions.
PRICING_INSIDE = ("layerwise.pricing.step", "layerwise.pricing.rows",
                  "layerwise.pricing.batch", "layerwise.pricing.network")
PRICING_READERS = {"layerwise.compose", "layerwise.per_type"}


def test_a_step_is_priced_through_one_entry_point():
    bad = sorted(f"{module} -> {target}" for module, targets in _graph().items()
                 if not module.startswith("layerwise.pricing") and module not in PRICING_READERS
                 for target in targets if target in PRICING_INSIDE)
    assert not bad, "\n".join(bad)
    forecast = (ROOT / "layerwise" / "forecast.py").read_text(encoding="utf-8")
    assert "price_network(" in forecast and "hasattr(" not in forecast
    defs = {node.name for path in (ROOT / "layerwise").rglob("*.py")
            if "pricing" not in path.parts
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef)}
    assert not defs & {"step_from_dict", "step_array", "price_rows", "price_network"}
