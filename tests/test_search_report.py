"""A search run's findings: each one's symptom (harness/experiments/search/symptom.py),
clustered with the smallest workload first (harness/report/search.py), and the
`results bugs` command that prints them. The check results are shaped as the guest
check makes them (harness/check/guest.py ``judge``: the oracle's verdict as JSON in
``note``)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from harness.check.host import CheckResult
from harness.cli.main import main
from harness.experiments.search import symptom
from harness.model import ace, acespace
from harness.outcome import Outcome
from harness.report import search
from harness.store.db import Store


def _loss(note: dict[str, object]) -> list[CheckResult]:
    return [
        CheckResult("host", "e2fsck", Outcome.CONSISTENT, 0, 0.1),
        CheckResult("guest", "mount+verify", Outcome.DATA_LOSS, 0, 0.5, note=json.dumps(note)),
    ]


def _workload(op_class: str, path: str) -> dict[str, object]:
    index = next(
        i
        for i in acespace.selection(1, 0, 1)
        if ace.describe(1, i)["op_class"] == op_class and ace.describe(1, i)["ops"].find(path) > 0
    )
    return ace.describe(1, index)


def test_a_missing_name_is_the_workloads_target_or_a_bystander() -> None:
    w = _workload("creat", "A/bar")
    cell, metrics = symptom.of(Outcome.DATA_LOSS, _loss({"missing": ["A/bar"]}), w, "ext4")
    assert (cell["rule"], cell["role"], cell["op_class"]) == ("file-missing", "target", "creat")
    assert metrics["path"] == "A/bar" and metrics["workload"] == w["id"]
    cell, _ = symptom.of(Outcome.DATA_LOSS, _loss({"missing": ["foo"]}), w, "ext4")
    assert cell["role"] == "bystander"
    mism = {"mismatched": [{"path": "A/bar", "xattrs": {}, "expected": {"user.b": "00"}}]}
    assert symptom.of(Outcome.DATA_LOSS, _loss(mism), w, "ext4")[0]["rule"] == "xattrs"


def test_a_failed_mount_names_the_checker_that_saw_it() -> None:
    w = _workload("rename-dir", "A")
    results = [CheckResult("guest", "mount", Outcome.MOUNT_FAILED, 32, 0.2)]
    cell, _ = symptom.of(Outcome.MOUNT_FAILED, results, w, "btrfs")
    assert (cell["rule"], cell["role"]) == ("guest mount", "-")


def test_clusters_group_one_symptom_and_lead_with_the_smallest_workload(tmp_path: Path) -> None:
    db = tmp_path / "lab.sqlite"
    with Store.open(db, create=True) as st:
        run = st.begin_run("ace-seq1", "search", {}, 1, fs="ext4")
        rows = [
            ("seq2-000900/m1", "seq2-000900", "creat(A/bar) fsync(A/bar); link(foo, bar) sync()"),
            ("seq1-000004/m1", "seq1-000004", "creat(A/bar) fsync_dir(A)"),
            ("seq1-000004/f2", "seq1-000004", "creat(A/bar) fsync_dir(A)"),
        ]
        for sid, wid, ops in rows:
            cell = {"fs": "ext4", "outcome": "data_loss", "rule": "file-missing"}
            cell |= {"role": "target", "op_class": "creat"}
            st.record_observation(run, f"bug:{sid}", cell, {"workload": wid, "ops": ops}, None)
        other = {"fs": "ext4", "outcome": "mount_failed", "rule": "guest mount", "role": "-"}
        other["op_class"] = "rmdir"
        st.record_observation(
            run,
            "bug:seq1-000009/m1",
            other,
            {"workload": "seq1-000009", "ops": "rmdir(A/C) sync()"},
            None,
        )
        st.record_observation(run, "workload:seq1-000004", {"op_class": "creat"}, {}, None)
        found = search.clusters(st, run[:6])
        # the canned query of `results serve`: the same clusters, in the same order
        clustered = st.execute(search.CLUSTERS_SQL, {"run": run[:6]})  # type: ignore[arg-type]
    got = [(*r[: len(search.KEY)], r[-6], r[-5], r[-3], r[-2]) for r in clustered]
    assert got == [
        (*c.symptom.values(), len(c.workloads), len(c.states), *c.smallest) for c in found
    ]
    assert [len(c.workloads) for c in found] == [2, 1]  # commonest first
    assert found[0].smallest == ("seq1-000004", "creat(A/bar) fsync_dir(A)")
    assert sorted(found[0].states) == sorted(r[0] for r in rows)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["results", "bugs", run, "--db", str(db), "--json"]) == 0
    got = json.loads(buf.getvalue())
    assert [c["rule"] for c in got] == ["file-missing", "guest mount"]
    assert got[0]["smallest"]["workload"] == "seq1-000004"
    # the state to triage: one of the smallest workload's (the first by id)
    assert got[0]["smallest"]["state"] == found[0].to_triage == "seq1-000004/f2"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["results", "bugs", run, "--db", str(db)]) == 0
    assert "  1: seq1-000004/f2\n" in buf.getvalue()
