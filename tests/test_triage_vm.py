"""``scenario triage`` end to end: a real positive control (``ext4-nofsync``, CI-sized)
recorded and checked, one of its data_loss states minimised with guest checks, and its
report folder written (a few minutes under TCG)."""

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
from harness.triage import minimal, report

pytestmark = pytest.mark.vm


def test_a_control_finding_is_minimised_and_still_fails_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    db = tmp_path / "lab.sqlite"
    sc = scenario.load("ext4-nofsync", ["workload.ops=30", "crash.max_states=4"])
    run = lifecycle.execute(sc, db=db)
    assert run.status == 1, dict(run.counts)
    with Store.open(db, create=False) as st:
        lost = [s for s in st.run_detail(run.run_id).states if s.outcome == "data_loss"]
    assert lost
    r = minimal.triage(lost[-1].id, db, max_candidates=12)
    assert r.original.outcome is Outcome.DATA_LOSS and r.original.findings
    assert r.found.same_way(r.original)
    assert len(r.search.items) <= len(r.delta.items)
    assert r.tally.guest >= 1 and r.tally.guest_boots >= 1
    with open_log(r.target.log_path) as lg:
        out = report.write(r, lg)
    summary = json.loads((out / "triage.json").read_text())
    assert summary["minimal"]["symptom"]["outcome"] == "data_loss"
    assert summary["differing"]["after"] == len(r.search.items)
    assert "| outcome | data_loss |" in (out / "README.md").read_text()
    # The control's syncs are in the script, commented out as the workload skipped them.
    script = (out / "workload.sh").read_text()
    assert "# mark crashlab:sync:1" in script and "not called: the control's fsync" in script
