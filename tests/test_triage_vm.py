"""``scenario triage`` end to end: a real positive control (``ext4-nobarrier``, CI-sized:
30 ops, 3 reorder states) recorded and checked, one of its data_loss states minimised
with guest checks (ddmin over the writes it loses, a budget of 40 candidates), and its
report folder written (about two minutes under TCG here); and the ``nofsync`` control's
workload minimised by re-recording. A search run's finding (ACE, the control that never
syncs) is triaged whole, state and workload, in test_search_vm.py, from the run whose
clusters it checks there (one recording for both)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config import scenario
from harness.experiments import lifecycle
from harness.image import build as image
from harness.outcome import Outcome
from harness.record.logwrites import open_log
from harness.store.db import Store
from harness.triage import minimal, report, workload

pytestmark = pytest.mark.vm


def test_a_control_finding_is_minimised_and_still_fails_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    db = tmp_path / "lab.sqlite"
    states = "crash.states=[{kind='reorder', max_states=3}]"
    sc = scenario.load("ext4-nobarrier", ["workload.ops=30", states, "crash.max_states=3"])
    run = lifecycle.execute(sc, db=db)
    with Store.open(db, create=False) as st:
        lost = [s for s in st.run_detail(run.run_id).states if s.outcome == "data_loss"]
    assert lost, dict(run.counts)
    r = minimal.triage(lost[0].id, db, max_candidates=40)
    assert r.original.outcome is Outcome.DATA_LOSS and r.original.findings
    assert r.found.same_way(r.original)
    assert r.delta.kind == "drops" and len(r.search.items) <= len(r.delta.items)
    assert r.found.outcome is Outcome.DATA_LOSS and r.state.dropped == r.search.items
    assert r.tally.guest >= 1 and r.tally.guest_boots >= 1
    with open_log(r.target.log_path) as lg:
        out = report.write(r, lg)
    summary = json.loads((out / "triage.json").read_text())
    assert summary["minimal"]["symptom"]["outcome"] == "data_loss"
    assert summary["differing"]["after"] == len(r.search.items)
    assert "| outcome | data_loss |" in (out / "README.md").read_text()
    assert "# mark crashlab:sync:1" in (out / "workload.sh").read_text()
    with open_log(out / "slice.log") as sl:
        assert len(sl.entries) == len(r.search.items)


def test_a_nofsync_findings_workload_is_minimised_by_re_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``ext4-nofsync`` control (fsync never called), CI-sized: a data_loss mark
    state's workload minimised -- each ddmin round's candidates re-recorded in one guest
    and their states at the oracle point checked -- to fewer ops that still lose a file
    the original lost, by the same rule; the report folder gets it as a shell program."""
    if image.cached() is None:
        pytest.skip("guest image not built")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    db = tmp_path / "lab.sqlite"
    sc = scenario.load("ext4-nofsync", ["workload.ops=6", "crash.max_states=3"])
    run = lifecycle.execute(sc, db=db)
    with Store.open(db, create=False) as st:
        lost = [s for s in st.run_detail(run.run_id).states if s.outcome == "data_loss"]
        # A state that lost a name or its bytes, not only a time (rule 20: the root's
        # mtime, which a sync that does nothing leaves behind too): its names are ops'.
        times = {sid for (sid,) in st.execute(
            "SELECT state_id FROM verdicts WHERE run_id = ? AND rule = 'times'", (run.run_id,)
        )}  # fmt: skip
    lost = [s for s in lost if s.id not in times]
    assert lost, dict(run.counts)
    r = minimal.triage(lost[0].id, db, max_candidates=40, workload=True)
    w = r.workload
    assert w is not None and w.plan is not None and w.search is not None, w
    before = w.plan.keep(w.plan.items)
    # The oracle point is kept: its op, or (at the workload's end) the final sync that
    # every recording ends with.
    assert w.plan.point is None or w.keep[-1] == w.plan.point
    assert len(w.keep) < len(before) and not w.search.capped
    assert w.tally.get("fails", 0) >= 1 and not w.tally.get("harness")
    # The minimal workload touches a name the original state lost.
    lost_names = {path for _, path in r.original.findings}
    touched = {getattr(w.plan.ops[i], k) for i in w.keep for k in ("path", "dst")}
    assert lost_names & touched, (lost_names, touched)
    with open_log(r.target.log_path) as lg:
        out = report.write(r, lg)
    summary = json.loads((out / "triage.json").read_text())["workload"]
    assert summary["minimised"] and summary["keep"] == list(w.keep)
    small = (out / "minimal-workload.sh").read_text()
    assert all(workload.render(w.plan.ops[i]) in small for i in w.keep)
    assert f"| ops | {len(w.plan.ops)} in the workload" in (out / "README.md").read_text()
