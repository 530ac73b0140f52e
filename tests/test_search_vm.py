"""The search kind end to end in real guests, CI-sized: twelve seq-1 workloads of ACE's
space recorded in two guests at once (each workload on its own slices of one data and one
log disk), every crash state at their persistence points checked with guest batches
across workloads in two guests at once; and the positive control, whose workloads never
really sync, found and clustered by symptom, one of its findings then triaged end to end
(state and workload) from the same run."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.config import scenario
from harness.crashstate import workloads as record
from harness.experiments import lifecycle
from harness.experiments.search.experiment import Search
from harness.experiments.search.settings import SearchScenario
from harness.image import build as image
from harness.model import ace, acespace
from harness.outcome import Outcome
from harness.record.logwrites import open_log
from harness.report import query
from harness.report import search as report
from harness.store.db import Store
from harness.triage import minimal, workload
from harness.triage import report as triage_report

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
    assert r.experiment.seconds["boot"] > 0, s
    # check.guests = 2: the twelve were recorded six a guest, in two guests at once
    with sqlite3.connect(db) as c:
        boots = c.execute("SELECT item FROM run_phases WHERE phase = 'boot'").fetchall()
    assert len(boots) == 2, boots
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
    picked = acespace.selection(1, 12, sc.seed)
    classes = {ace.describe(1, i)["op_class"] for i in picked}
    # a group per op class, and one of no class: the recording guests' boots, which are
    # no workload's (run_phases), with no workload and no state of its own
    groups = {g.key[0]: g for g in table.groups}
    assert len(classes) >= 8 and set(groups) - {None} == classes
    assert None not in groups or (
        set(groups[None].stats) == {"boot"} and not groups[None].counts.get("workloads")
    ), groups[None]
    assert sum(g.stats["record"].n for g in table.groups if "record" in g.stats) == 12


@pytest.fixture(scope="module")
def never_syncs(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SearchScenario, lifecycle.Report, Path]]:
    """The positive control whose workloads never really sync (the marks and the oracle as
    if they had), run once for the module: its findings are clustered by one test and
    triaged by the next. Its run folder (and the triage's, under it) stays set for both."""
    if image.cached() is None:
        pytest.skip("guest image not built")
    tmp = tmp_path_factory.mktemp("never-syncs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRASHLAB_WORK", str(tmp / "work"))
        mp.setenv("CRASHLAB_RESULTS", str(tmp / "results"))
        sc = scenario.load(
            "ace-seq1-ci",
            ("workload.noop_sync=true", "expect=findings",
             'workload.op_classes=["creat","append"]', "workload.sample=0",
             "workload.limit=4"),
        )  # fmt: skip
        assert isinstance(sc, SearchScenario)
        db = tmp / "lab.sqlite"
        yield sc, lifecycle.execute(sc, db=db), db


def test_ace_positive_control_is_found_and_clustered(
    never_syncs: tuple[SearchScenario, lifecycle.Report, Path],
) -> None:
    """The creat and append workloads must lose what their persistence op promised."""
    sc, r, db = never_syncs
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
    recorded = {f"seq1-{i:06d}" for i in acespace.selection(1, 0, sc.seed, 4, ["creat", "append"])}
    assert all(set(c.workloads) <= recorded for c in found), [c.workloads for c in found]


def test_a_search_finding_is_triaged_end_to_end(
    never_syncs: tuple[SearchScenario, lifecycle.Report, Path],
) -> None:
    """One data_loss state of the control's first workload (ACE seq-1 index 0,
    ``creat(bar) fsync(bar)``) triaged from the workload's own log -- its minimal state,
    then its minimal workload, ACE's ops re-recorded in a guest -- to a workload no longer
    than the original that still fails the same way (outcome and a shared oracle
    finding), written as a standalone program. Minimised twice alike: the state on the
    host (test_triage_search.py), ddmin over ops (test_opmin.py); a second workload
    minimisation here only re-recorded and re-checked round 0 again, and round 0 is
    itself a re-recording that must fail the same way, else there is no search."""
    _, run, db = never_syncs
    with Store.open(db, create=False) as st:
        states = st.run_detail(run.run_id).states
    lost = [s for s in states if s.outcome == "data_loss" and s.id.startswith("seq1-000000/")]
    assert lost, [(s.id, s.outcome) for s in states]
    r = minimal.triage(lost[0].id, db, max_candidates=20, workload=True)
    assert r.target.log_path == lifecycle.run_dir(run.run_id) / "workloads/seq1-000000/log.raw"
    assert r.original.outcome is Outcome.DATA_LOSS and r.found.same_way(r.original)
    w = r.workload
    assert w is not None and w.plan is not None and w.search is not None, w
    assert w.plan.source["kind"] == "ace" and not w.tally.get("harness"), w.tally
    assert len(w.keep) <= len(w.plan.keep(w.plan.items)) and not w.search.capped
    assert w.found is not None and w.found.outcome is r.original.outcome
    assert w.found.same_way(r.original) and set(w.found.rules) & set(r.original.rules)
    # The minimal workload keeps the oracle point: the fsync (or the final sync).
    assert w.plan.point is None or w.keep[-1] == w.plan.point
    with open_log(r.target.log_path) as lg:
        out = triage_report.write(r, lg)
    small = (out / "minimal-workload.sh").read_text()
    assert "harness.guest.ace record --seq 1 --index 0 --noop-sync" in small
    assert all(workload.render(w.plan.ops[i]) in small for i in w.keep)
    summary = json.loads((out / "triage.json").read_text())
    assert summary["workload"]["keep"] == list(w.keep)
    assert summary["search_workload"] == "seq1-000000"
