"""The folders are the pipeline, and imports flow one way down it (issue 8): a step never
imports a later one, so a newcomer can read the tree from the top."""

from __future__ import annotations

import ast

from harness import paths

# The shared vocabulary first (``model``: the ops, the oracle and the contract, which the
# guest imports too), then the steps in the order a run goes through them. The guest
# programs (stdlib only: they run in the guest) sit beneath the recorder that installs
# them and reads their words (model/kernlog.py).
SHARED = ("outcome", "waivers", "errors", "paths", "tools", "proc", "filesystems", "model")
STEPS = ("config", "image", "kernel", "vm", "guest", "record", "replay", "check", "store")
# Reports read the store; the crash-state core (a state's log, cutting, checks, verdict,
# a stored state found again) is what the kinds that cut crash states share, and its
# summary body is a report; an experiment kind (one folder: settings, steps, summary
# body) uses them; triage takes stored states and re-checks candidates with the core;
# fstests' side (a test written from ops and the oracle, ./check run in a guest) is what
# triage hands a maintainer; campaigns run kinds; the command line drives all.
STEPS += ("report", "crashstate", "experiments", "fstests", "triage", "campaign", "cli")
RANK = {name: i for i, name in enumerate((*SHARED, *STEPS))}
# The one way up, and why: the scenario loader and the JSON Schema find a file's kind by
# the kinds' records (a plugin lookup; the kinds' settings models live in their folders).
UPWARD_BY_DESIGN = {
    ("harness/config/scenario.py", "harness.experiments.registry"),
    ("harness/config/schema.py", "harness.experiments.registry"),
    # The reports find their tables, charts and dashboard panels in the kinds' records.
    ("harness/report/query.py", "harness.experiments"),
}


def _step(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else None


def test_every_package_is_a_step_of_the_pipeline() -> None:
    root = paths.REPO / "harness"
    found = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    found |= {p.stem for p in root.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert found == set(RANK)


def test_imports_flow_down_the_pipeline() -> None:
    upward = []
    for f in sorted((paths.REPO / "harness").rglob("*.py")):
        me = _step(".".join(f.relative_to(paths.REPO).with_suffix("").parts))
        if me not in RANK:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            targets = [f"{node.module}.{a.name}" for a in node.names]
            for target in targets if node.module == "harness" else [node.module]:
                other = _step(target)
                where = str(f.relative_to(paths.REPO))
                if (where, target) in UPWARD_BY_DESIGN:
                    continue
                if other in RANK and RANK[other] > RANK[me]:
                    upward.append(f"{where} imports {target}")
    assert upward == []


def test_faults_are_models_that_need_no_harness() -> None:
    for f in (paths.REPO / "faults").glob("*.py"):
        assert "from harness" not in f.read_text() and "import harness" not in f.read_text()


def test_the_faults_folder_says_what_it_holds() -> None:
    """faults/'s docstring names each of its models (it once described code moved away)."""
    import faults

    held = {f.stem for f in (paths.REPO / "faults").glob("*.py") if f.stem != "__init__"}
    assert held and all(f"``{m}``" in (faults.__doc__ or "") for m in held)
