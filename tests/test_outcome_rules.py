"""One rule per outcome (issue 36): which outcomes are findings, and which the lab's, is
decided in harness/outcome.py alone; the store keeps that classification
(``outcome_classes``) and every view reads it. A set of findings written out anywhere else
-- an SQL ``IN ('repaired', ...)`` list, a Python set or tuple of the names or of the
``Outcome`` members -- is a second copy that drifts, and fails here."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import outcome, paths
from harness.outcome import FINDINGS, HARNESS, Counted, Outcome, counts_as
from harness.store.db import Store

ROOTS = ("harness", "faults", "bench")
HOME = paths.REPO / "harness" / "outcome.py"
SETS = {"findings": {str(o) for o in FINDINGS}, "harness outcomes": {str(o) for o in HARNESS}}
# Two names of one set, quoted and next to each other in a string: an SQL list.
_QUOTED = {
    what: re.compile(rf"'({'|'.join(names)})'\s*,\s*'({'|'.join(names)})'")
    for what, names in SETS.items()
}


def _sources() -> Iterator[Path]:
    for root in ROOTS:
        yield from sorted((paths.REPO / root).rglob("*.py"))


def _member(node: ast.expr) -> str | None:
    """The outcome a display element names: ``"repaired"`` or ``Outcome.REPAIRED``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Outcome"
        and node.attr in Outcome.__members__
    ):
        return str(Outcome[node.attr])
    return None


def literal_sets(source: str) -> list[str]:
    """Every set of findings (or of harness outcomes) ``source`` spells out."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for what, pattern in _QUOTED.items():
                if pattern.search(node.value):
                    found.append(f"line {node.lineno}: {what} in an SQL list")
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            names = {_member(e) for e in node.elts}
            for what, members in SETS.items():
                if len(names & members) >= 2:
                    found.append(f"line {node.lineno}: {what} as a Python {type(node).__name__}")
    return found


def test_no_set_of_findings_outside_outcome_py() -> None:
    copies = [
        f"{f.relative_to(paths.REPO)} {where}"
        for f in _sources()
        if f != HOME
        for where in literal_sets(f.read_text())
    ]
    assert copies == []


@pytest.mark.parametrize(
    "source",
    [
        "Q = \"SELECT 1 WHERE outcome IN ('repaired', 'unrepairable', 'data_loss')\"",
        "Q = f\"WHERE o IN ('harness_error', 'timeout') AND {x}\"",
        "BAD = {Outcome.MOUNT_FAILED, Outcome.DATA_LOSS}",
        "BAD = ('repaired', 'data_loss')",
    ],
)
def test_the_scan_sees_a_copy(source: str) -> None:
    assert literal_sets(source)


def test_the_scan_lets_one_outcome_be() -> None:
    assert not literal_sets("ok = (Outcome.CONSISTENT, Outcome.REPAIRED)")
    assert not literal_sets("cols = ('examined', 'issued', 'repaired')")


def _chooses_a_status(f: Path, node: ast.IfExp) -> bool:
    """``EXIT_FINDING if ... else EXIT_OK`` anywhere, ``3 if ... else 0`` in the CLI."""
    branches = (node.body, node.orelse)
    if any(isinstance(b, ast.Name | ast.Attribute) and "EXIT_" in ast.unparse(b) for b in branches):
        return True
    return "cli" in f.parts and all(
        isinstance(b, ast.Constant) and type(b.value) is int for b in branches
    )


def test_every_exit_status_is_outcome_py_s() -> None:
    """No literal exit status is returned in the command line, and no status is chosen
    by a conditional outside outcome.py (``EXIT_FINDING if ... else``)."""
    bad = []
    for f in _sources():
        if f == HOME or "guest" in f.parts:  # guest programs: their own protocol's codes
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.IfExp) and _chooses_a_status(f, node):
                bad.append(f"{f.relative_to(paths.REPO)}:{node.lineno} {ast.unparse(node)}")
            if "cli" in f.parts and isinstance(node, ast.Return) and node.value is not None:
                v = node.value
                if isinstance(v, ast.Constant) and isinstance(v.value, int) and v.value != 0:
                    bad.append(f"{f.relative_to(paths.REPO)}:{node.lineno} return {v.value}")
    assert bad == []


def test_the_store_holds_outcome_py_s_classification(tmp_path: Path) -> None:
    with Store.open(tmp_path / "lab.sqlite") as st:
        rows = st.execute("SELECT outcome, expected, severity, counts_as FROM outcome_classes")
        assert sorted(rows) == sorted(outcome.classes())
        # A store written under other rules is brought to outcome.py's when opened.
        st.execute("UPDATE outcome_classes SET counts_as = 'clean' WHERE outcome = 'data_loss'")
    with Store.open(tmp_path / "lab.sqlite") as st:
        rows = st.execute("SELECT outcome, expected, severity, counts_as FROM outcome_classes")
        assert sorted(rows) == sorted(outcome.classes())


def test_counts_as_is_the_account_s_rule() -> None:
    assert counts_as(Outcome.DATA_LOSS) is Counted.FINDING
    assert counts_as(Outcome.DATA_LOSS, expected=True) is Counted.EXPECTED
    assert counts_as(Outcome.TIMEOUT, expected=True) is Counted.HARNESS  # a hang is the lab's
    assert counts_as(Outcome.CONSISTENT) is Counted.CLEAN
    assert counts_as(Outcome.SKIPPED) is Counted.SKIPPED
    assert {o for o in Outcome if counts_as(o) is Counted.FINDING} == FINDINGS


def test_a_merged_run_keeps_which_items_were_expected(tmp_path: Path) -> None:
    """A run written on a Dask worker's scratch store is merged whole: its account and
    the items its kind's rule expected (``expected_items``), which the views read."""
    from test_store import check, new_run, state

    from harness.outcome import Tallied, tally
    from harness.store.merge import snapshot

    scratch, snap = tmp_path / "scratch.sqlite", tmp_path / "snap.sqlite"
    with Store.open(scratch) as src:
        run_id = new_run(src)
        src.record_state_result(run_id, state(0), [check(Outcome.REPAIRED)], {})
        src.record_state_result(run_id, state(1), [check(Outcome.DATA_LOSS)], {})
        account = tally(
            [Tallied("fua-0000", Outcome.REPAIRED, True), Tallied("fua-0001", Outcome.DATA_LOSS)]
        )
        src.set_account(run_id, account)
    snap.write_bytes(snapshot(scratch))
    with Store.open(tmp_path / "lab.sqlite") as st:
        st.merge_run(snap, run_id)
        assert st.account(run_id)[0].expected_items == {"fua-0000"}
        rows = st.execute("SELECT state_id, counts_as FROM v_states ORDER BY state_id")
        assert rows == [("fua-0000", "expected"), ("fua-0001", "finding")]
        assert st.execute("SELECT findings, expected_outcomes FROM v_runs") == [(1, 1)]


def test_the_account_s_expected_items_follow_the_account(tmp_path: Path) -> None:
    """Written after every item, only what changed: an item no longer expected goes."""
    from test_store import new_run

    from harness.outcome import Tallied, tally

    with Store.open(tmp_path / "lab.sqlite") as st:
        run_id = new_run(st)
        st.set_account(run_id, tally([Tallied("a", Outcome.REPAIRED, True)]))
        st.set_account(
            run_id, tally([Tallied("a", Outcome.DATA_LOSS), Tallied("b", Outcome.PANIC, True)])
        )
        assert st.account(run_id)[0].expected_items == {"b"}
