"""The package's layering, checked on its source (issue 21): read with ``ast``, nothing
imported or run."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"


def _modules(under: Path = HARNESS) -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(under.rglob("*.py")):
        rel = path.relative_to(HARNESS.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        yield ".".join(parts), path, ast.parse(path.read_text(), str(path))


SQL_CALLS = {"execute", "executemany", "executescript"}


def _sql_outside_the_store() -> list[str]:
    """Where a module outside harness/store/ imports sqlite3 or runs a statement itself.

    harness/guest/ is not the lab's code: those programs run inside the guest, and
    sqlitepat.py's SQLite database is a workload under test, not our store. A call of
    ``execute`` on a module (``lifecycle.execute``, ``opgen.execute``) is a function of
    ours, not SQL.
    """
    found = []
    for name, path, tree in _modules():
        if name.startswith(("harness.store", "harness.guest")):
            continue
        modules = {
            a.asname or a.name.partition(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for a in node.names
        } | {
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for a in node.names
            if a.name[:1].islower()  # a module or a function, not a class
        }
        for node in ast.walk(tree):
            where = f"{path.relative_to(HARNESS.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import) and any(a.name == "sqlite3" for a in node.names):
                found.append(f"{where}: import sqlite3")
            elif isinstance(node, ast.ImportFrom) and node.module == "sqlite3":
                found.append(f"{where}: from sqlite3 import")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SQL_CALLS
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id in modules)
            ):
                found.append(f"{where}: .{node.func.attr}(")
    return found


def test_sql_only_in_the_store() -> None:
    # Every statement is a named Store method (store/reads.py, queries.py, campaigns.py),
    # so the schema can change in one folder and a reader names what it wants.
    assert _sql_outside_the_store() == []


def _type_checking(node: ast.AST) -> bool:
    """An ``if TYPE_CHECKING:`` block: imports for annotations, never executed."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(name: str, level: int, module: str) -> str:
    """A relative import's module as an absolute name (the model and the guest programs
    import each other relatively: the guest has them as the same package)."""
    if not level:
        return module
    package = (HARNESS.parent / name.replace(".", "/") / "__init__.py").exists()
    parts = name.split(".")[: None if package else -1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, *([module] if module else [])])


def _import_names(name: str, tree: ast.Module, *, annotations: bool = True) -> set[str]:
    """Every dotted name module ``name`` imports, anywhere (a function's lazy import too:
    it is still a dependency, only a later one): ``from a.b import c`` gives ``a.b`` and
    ``a.b.c`` (c may be a module). ``annotations=False`` leaves out ``if TYPE_CHECKING:``
    blocks."""
    out: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if not annotations and _type_checking(node):
            assert isinstance(node, ast.If)
            todo += node.orelse
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, node.level, node.module or "")
            out |= {base, *(f"{base}.{a.name}" for a in node.names)}
        todo += ast.iter_child_nodes(node)
    return out


def _imported(
    name: str, tree: ast.Module, known: set[str], *, annotations: bool = True
) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere."""
    return (_import_names(name, tree, annotations=annotations) & known) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one
    module (Tarjan's algorithm), each sorted, in order of their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _harness_graph() -> dict[str, set[str]]:
    """Every module of harness/ -> the modules of harness/ it imports when it runs (at
    import time or inside a function). An ``if TYPE_CHECKING:`` import is left out: it is
    never executed, so it closes no cycle (registry.py names lifecycle's types so)."""
    mods = {name: tree for name, _, tree in _modules()}
    return {n: _imported(n, t, set(mods), annotations=False) for n, t in mods.items()}


def test_no_import_cycle_anywhere() -> None:
    # A cycle makes import order matter and hides the layering: a backend importing its
    # chooser (as qemu and libvirt did vm.backend), or a lazy import inside a function,
    # still one (kernel/store.py imported add and mutant so, which import it).
    cycles = _cycles(_harness_graph())
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_every_cycle_and_no_other() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": {"a"}}
    assert _cycles(g) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_a_lazy_import_counts_and_a_type_checking_one_does_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from harness import b\nelse:\n    import harness.c\n"
        "def f():\n    from harness.d import e\n"
    )
    known = {"harness.b", "harness.c", "harness.d", "harness.d.e"}
    assert _imported("harness.a", tree, known, annotations=False) == known - {"harness.b"}
    assert _imported("harness.a", tree, known) == known


EXPERIMENTS = HARNESS / "experiments"


def _kinds() -> set[str]:
    """The folders of harness/experiments/: one a kind each."""
    return {p.name for p in EXPERIMENTS.iterdir() if (p / "__init__.py").exists()}


def _kind_imported(module: str, tree: ast.Module) -> set[str]:
    """The kinds (folders of harness/experiments/) whose modules ``module`` imports."""
    kinds = _kinds()
    out = set()
    for target in _import_names(module, tree):
        parts = target.split(".")
        if parts[:2] == ["harness", "experiments"] and len(parts) > 2 and parts[2] in kinds:
            out.add(parts[2])
    return out


def _between_kinds() -> list[str]:
    found = []
    for name, path, tree in _modules(EXPERIMENTS):
        me = path.relative_to(EXPERIMENTS).parts
        if len(me) < 2:
            continue  # lifecycle.py, registry.py, summary.py: every kind's, not a kind
        found += [
            f"{name} imports the kind {k}" for k in sorted(_kind_imported(name, tree) - {me[0]})
        ]
    return found


def test_no_kind_imports_another_kind() -> None:
    # What kinds share is the crash-state core's (harness/crashstate/) or below: a kind
    # is one folder, added or removed without touching another.
    assert _between_kinds() == []


def _triage_kinds() -> list[str]:
    return [
        f"{name} imports the kind {k}"
        for name, _, tree in _modules(HARNESS / "triage")
        for k in sorted(_kind_imported(name, tree))
    ]


def test_triage_uses_the_core_not_the_kinds() -> None:
    # A stored state, its log, its checks: harness/crashstate/, whichever kind cut it.
    assert _triage_kinds() == []
