"""No function over 80 lines in the lab's code (issue 36): one a reader takes in at
once, or split into pieces that say what they do. Measured with ast, from a function's
``def`` (its decorators left out) to its last line, docstring and comments included."""

from __future__ import annotations

import ast

from harness import paths

LIMIT = 80
ROOTS = ("harness", "faults")


def lengths() -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method, longest first."""
    out = []
    for root in ROOTS:
        for f in sorted((paths.REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = (node.end_lineno or node.lineno) - node.lineno + 1
                    out.append((n, f"{f.relative_to(paths.REPO)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


def test_no_function_is_over_80_lines() -> None:
    assert [f"{where} ({n} lines)" for n, where in lengths() if n > LIMIT] == []
