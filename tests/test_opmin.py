"""The minimal workload's op-level ddmin driver (harness/triage/opmin.py), pure logic:
the oracle it plans from is the real op generator's, run on a temporary directory of
the host (no guest: only the op list and its marks matter here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.guest import opgen
from harness.model import ace
from harness.model.ops import Op
from harness.model.oracle.doc import OracleDoc
from harness.triage import opmin

REPO = Path(__file__).resolve().parent.parent
PARAMS: dict[str, Any] = {"workload": {"type": "ops", "noop_sync": True}}


def oracle_of(tmp: Path, seed: int = 7, ops: int = 25) -> dict[str, Any]:
    root, out = tmp / "root", tmp / "oracle.json"
    root.mkdir()
    argv = ["run", "--root", str(root), "--seed", str(seed), "--ops", str(ops)]
    argv += ["--files", "8", "--max-size", "65536", "--mark-cmd", "none", "--noop-sync"]
    assert opgen.main([*argv, "--oracle", str(out)]) == 0
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return oracle_of(tmp_path_factory.mktemp("opgen"))


def test_the_oracle_point_is_kept_and_only_ops_before_it_are_items(
    oracle: dict[str, Any],
) -> None:
    third = next(o for o in oracle["ops"] if o.get("mark") == "crashlab:sync:3")
    p = opmin.plan(PARAMS, OracleDoc.of(oracle), "crashlab:sync:3", None)
    assert p.point == third["i"] and p.items == tuple(range(third["i"]))
    assert p.keep((0, 2)) == (0, 2, third["i"])
    assert opmin.persistence_ops(p, p.keep(p.items)) == 3


@pytest.mark.parametrize("mark", ["crashlab:umount", "final"])
def test_a_state_at_the_workloads_end_takes_every_op(oracle: dict[str, Any], mark: str) -> None:
    mark = oracle["final_mark"] if mark == "final" else mark
    p = opmin.plan(PARAMS, OracleDoc.of(oracle), mark, None)
    assert p.point is None and len(p.items) == len(oracle["ops"]) - 1  # the final sync
    assert p.keep((1, 4)) == (1, 4)
    # A candidate is judged at its own final sync's mark (or the umount the state had).
    expected = "crashlab:umount" if mark == "crashlab:umount" else "crashlab:sync:2"
    assert p.point_mark(OracleDoc.of({"final_mark": "crashlab:sync:2"})) == expected


def test_a_candidate_is_judged_at_the_mark_its_point_leaves(oracle: dict[str, Any]) -> None:
    p = opmin.plan(PARAMS, OracleDoc.of(oracle), "crashlab:sync:3", None)
    recorded = {"ops": [{"op": "create"}, {"op": "fsync_dir", "mark": "crashlab:sync:1"}]}
    candidate = OracleDoc.of({**recorded, "final_mark": "crashlab:sync:2"})
    assert p.point_mark(candidate) == "crashlab:sync:1"


@pytest.mark.parametrize(
    ("params", "mark", "says"),
    [
        ({"workload": {"type": "fio", "job": "[a]"}}, "crashlab:sync:1", "a fio workload"),
        (PARAMS, None, "before the workload's first persistence point"),
        (PARAMS, "crashlab:mkfs", "before the workload's first persistence point"),
    ],
)
def test_what_is_not_minimised_says_why(
    oracle: dict[str, Any], params: dict[str, Any], mark: str | None, says: str
) -> None:
    with pytest.raises(opmin.NotMinimised, match=says):
        opmin.plan(params, OracleDoc.of(oracle), mark, None)


def test_an_op_list_the_generator_no_longer_draws_is_not_minimised(
    oracle: dict[str, Any],
) -> None:
    changed = {**oracle, "ops": [{**oracle["ops"][0], "path": "elsewhere"}, *oracle["ops"][1:]]}
    with pytest.raises(opmin.NotMinimised, match="no longer draws"):
        opmin.plan(PARAMS, OracleDoc.of(changed), "crashlab:sync:1", None)


def test_a_subset_without_its_files_create_is_no_workload(oracle: dict[str, Any]) -> None:
    p = opmin.plan(PARAMS, OracleDoc.of(oracle), oracle["final_mark"], None)
    ops = ace.source_ops(p.source)
    create = next(i for i, o in enumerate(p.ops) if o.op == "create")
    path = p.ops[create].path
    uses = next(i for i, o in enumerate(p.ops) if i > create and o.path == path)
    assert opmin.valid(ops, (create, uses), True)
    assert not opmin.valid(ops, (uses,), True)
    assert opmin.missing(ops, (uses,), True) == (uses, path)
    assert opmin.valid(ops, p.keep(p.items), True)


def test_a_subset_is_closed_under_the_ops_that_make_its_names(oracle: dict[str, Any]) -> None:
    """Every op of the run's workload alone, closed: a workload again, holding the op,
    and adding only ops that come before it; an op that needs nothing stays alone."""
    p = opmin.plan(PARAMS, OracleDoc.of(oracle), oracle["final_mark"], None)
    ops = ace.source_ops(p.source)
    grown = 0
    for i in p.items:
        k = opmin.closed(ops, (i,), True)
        assert k is not None and i in k and max(k) == i and opmin.valid(ops, k, True)
        grown += len(k) > 1
        if opmin.valid(ops, (i,), True):
            assert k == (i,)
    assert grown  # the generator's writes need their creates
    first_write = next(i for i, o in enumerate(p.ops) if o.op in ("write", "append"))
    path = p.ops[first_write].path
    maker = max(
        i
        for i, o in enumerate(p.ops[:first_write])
        if (o.op == "create" and o.path == path) or o.dst == path
    )
    assert maker in (opmin.closed(ops, (first_write,), True) or ())


def test_a_name_nothing_makes_is_no_workload() -> None:
    ops = [Op("append", "nowhere", data=b"x"), Op("fsync", "nowhere")]
    assert opmin.closed(ops, (0, 1), True) is None
    assert opmin.missing(ops, (1,), True) == (1, "nowhere")


def test_ddmin_over_ops_asks_only_workloads_and_finds_the_ops_that_fail() -> None:
    """A failure that needs ops 3 and 11 (say: a create and the write it fsyncs) of 20,
    where op 11 is no workload without op 3: ddmin finds (3, 11), never asks a
    candidate that is no workload, and asks the same rounds each time."""
    p = opmin.Plan({}, tuple({"op": "write"} for _ in range(21)), 20, "crashlab:sync:1")

    def run() -> tuple[tuple[int, ...], list[list[tuple[int, ...]]]]:
        asked: list[list[tuple[int, ...]]] = []

        def fails(cands: list[tuple[int, ...]]) -> list[bool]:
            asked.append(cands)
            return [{3, 11} <= set(c) for c in cands]

        def is_valid(s: tuple[int, ...]) -> bool:
            return 11 not in s or 3 in s

        m = opmin.minimise(p, fails, max_candidates=200, known={(): False}, is_valid=is_valid)
        assert m.rounds == len(asked) and not m.capped
        assert all(is_valid(c) for r in asked for c in r)
        return m.items, asked

    first, asked = run()
    assert first == (3, 11) and p.keep(first) == (3, 11, 20)
    assert run() == (first, asked)


def test_a_round_of_only_non_workloads_asks_nothing() -> None:
    p = opmin.Plan({}, tuple({"op": "write"} for _ in range(4)), None, "crashlab:umount")
    asked: list[list[tuple[int, ...]]] = []

    def fails(cands: list[tuple[int, ...]]) -> list[bool]:
        asked.append(cands)
        return [False for _ in cands]

    m = opmin.minimise(p, fails, max_candidates=50, known={(): False}, is_valid=lambda s: False)
    assert m.items == (0, 1, 2, 3) and asked == []


def test_a_workload_files_ops_are_planned_from_the_file(tmp_path: Path) -> None:
    """A bug report's steps (here the xfs exchange finding's, docs/findings/) are
    re-recorded op by op like the generator's: the plan's source parses the run's text
    again, and draws the very ops its oracle recorded."""
    from harness.model import opfile

    text = (REPO / "docs/findings/xfs-exchange-fsync/exchange-fsync.ops").read_text()
    (tmp_path / "root").mkdir()
    body = opgen.execute(str(tmp_path / "root"), opfile.to_ops(opfile.parse(text, "xfs")))
    assert body["complete"], body["error"]
    params = {"fs": {"type": "xfs"}, "workload": {"type": "file", "text": text,
                                                  "fsync_names": True}}  # fmt: skip
    fsync = next(o for o in body["ops"] if o["op"] == "fsync")
    p = opmin.plan(params, OracleDoc.of(body), fsync["mark"], None)
    assert p.source["kind"] == "file" and p.point == fsync["i"] == 6
    assert p.items == tuple(range(6))
    assert [o.describe()["op"] for o in ace.source_ops(p.source)][5:] == ["exchange", "fsync"]
