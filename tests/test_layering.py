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


def _imported(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere (a function's lazy
    import too: it is still a dependency, only a later one)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            # harness imports absolutely only (ruff's TID252 would say so first)
            assert not node.level, f"{name}:{node.lineno}: a relative import"
            base = node.module or ""
            out |= {base, *(f"{base}.{a.name}" for a in node.names)}
    return (out & known) - {name}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, as the modules along it, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph[node]):
            found = visit(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found:
            return found
    return None


def test_no_import_cycle_among_the_vm_modules() -> None:
    # The backends implement vm.base; vm.backend chooses one. A backend importing its
    # chooser (as qemu and libvirt did) makes import order matter and hides the layering.
    mods = {name: tree for name, _, tree in _modules(HARNESS / "vm")}
    graph = {name: _imported(name, tree, set(mods)) for name, tree in mods.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
