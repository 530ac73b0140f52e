"""The search kind end to end in real guests, CI-sized: twelve seq-1 workloads of ACE's
space recorded in one guest (each on its own slices of one data and one log disk),
every crash state at their persistence points checked with guest batches across
workloads; and the positive control, whose workloads never really sync, found and
clustered by symptom."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import scenario
from harness.crashstate import workloads as record
from harness.experiments import lifecycle
from harness.experiments.search.experiment import Search
from harness.guest import ace
from harness.image import build as image
from harness.outcome import Outcome
from harness.report import query
from harness.report import search as report
from harness.store.db import Store

pytestmark = pytest.mark.vm


def test_ace_seq1_slice_is_recorded_in_one_guest_and_every_state_judged(
    guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load("ace-seq1-ci")
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, Search)
    s = r.summary
    assert s["workloads"] == 12 and s["workload_status"] == {"recorded": 12}, s
    assert r.experiment.seconds["boot"] > 0, s  # one recording guest: one boot's seconds
    assert r.status == 0 and r.counts == {"consistent": r.items}, (r.counts, s)
    with Store.open(db, create=False) as st:
        states = st.run_detail(r.run_id).states
        table = query.grouped(st, "workloads", ["op_class"], [r.run_id])
    # each workload's own log, cut after its base file set: states at its persistence
    # point, its final sync and the end of its log
    by_workload: dict[str, int] = {}
    for state in states:
        wid = state.id.split("/")[0]
        by_workload[wid] = by_workload.get(wid, 0) + 1
        assert state.last_mark not in (None, "crashlab:mkfs", "crashlab:sync:1"), state.id
    assert len(by_workload) == 12 and min(by_workload.values()) >= 2
    for wid in by_workload:
        kept = record.load(lifecycle.run_dir(r.run_id), wid)
        assert kept is not None and kept.log.stat().st_size > 0
    picked = ace.selection(1, 12, sc.seed)
    classes = {ace.describe(1, i)["op_class"] for i in picked}
    assert len(classes) >= 8 and {g.key[0] for g in table.groups} == classes
    assert sum(g.stats["record_seconds"].n for g in table.groups) == 12


def test_ace_positive_control_is_found_and_clustered(
    guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workloads that never really sync (the marks and the oracle as if they had): the
    creat and append workloads must lose what their persistence op promised."""
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load(
        "ace-seq1-ci",
        ("workload.noop_sync=true", "expect=findings", 'workload.op_classes=["creat","append"]',
         "workload.sample=0", "workload.limit=4"),
    )  # fmt: skip
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert r.counts.get(str(Outcome.DATA_LOSS), 0) > 0, r.counts
    assert r.status == 0  # the control's answer is the expected one
    with Store.open(db, create=False) as st:
        found = report.clusters(st, r.run_id)
    assert found, "a finding without a symptom row"
    # The base's sync is skipped too, so its directory and files may go with the op's.
    rules = {c.symptom["rule"] for c in found}
    assert rules <= {"file-missing", "dir-missing", "content", "append-prefix"}, rules
    # One symptom per state (the oracle's first broken promise), so a lost base directory
    # may stand for the op's own loss; what must hold is that every losing state is in a
    # cluster, and each cluster's workloads are the ones this run recorded.
    assert sum(len(c.states) for c in found) == r.counts[str(Outcome.DATA_LOSS)]
    recorded = {f"seq1-{i:06d}" for i in ace.selection(1, 0, sc.seed, 4, ["creat", "append"])}
    assert all(set(c.workloads) <= recorded for c in found), [c.workloads for c in found]
