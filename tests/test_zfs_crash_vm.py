"""Multi-disk crash states end to end in real guests: record a tiny raidz1 on three
logged vdevs, cut it, import and scrub the disk sets (~2-3 min under TCG)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import paths
from harness.config import scenario
from harness.experiments import lifecycle
from harness.experiments.zfs import crash
from harness.experiments.zfs.settings import ZfsScenario
from harness.image import build as image
from harness.outcome import Outcome, is_harness
from harness.store import db as store

pytestmark = pytest.mark.vm


def test_pool_crash_states(guest_image: image.Image, tmp_path: Path) -> None:
    sc = scenario.load(
        paths.REPO / "scenarios" / "zfs-crash-raidz1.toml",
        (
            "disk_size=64M",
            # One round: its common mark is the consistent cut that must import with
            # every file (beside mkfs's), and the torn states' interval (two).
            "crash.rounds=1",
            "crash.ops=3",
            "crash.max_size=64K",
            "crash.torn_per_interval=2",
            "crash.torn_max_states=2",
            "crash.guest_batch=8",
        ),
    )
    assert isinstance(sc, ZfsScenario)
    db = tmp_path / "lab.sqlite"
    report = lifecycle.execute(sc, db=db)
    r = report.experiment
    assert isinstance(r, crash.ZfsCrash)
    consistent = [s for s in r.states if s.consistent]
    assert [s.mark for s in consistent] == ["crashlab:mkfs", "crashlab:zsync:1"]
    assert len(r.states) == len(consistent) + 2 and set(r.results) == {s.id for s in r.states}
    # A pool cut at a moment it was idle on every disk imports cleanly, with every file.
    for s in consistent:
        c = r.results[s.id]
        assert c.outcome is Outcome.CONSISTENT, c.output
        assert c.verify is not None and c.verify["ok"]
        # and zdb on the host reads the same images as clean (every checksum, no leak)
        assert c.zdb is not None and c.zdb.ok and not c.zdb_disagrees, c.zdb
    assert r.results[consistent[-1].id].verify["checked"] > 0  # type: ignore[index]
    for s in r.states:
        assert not is_harness(r.results[s.id].outcome), r.results[s.id].output
    with store.Store.open(db, create=False) as st:
        run = st.run(report.run_id)
        assert run.kind == "zfs" and run.status == "done"
        rows = st.execute(
            "SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (report.run_id,)
        )
        assert {sid for sid, _ in rows} == {s.id for s in r.states}
        zdb_rows = st.execute(
            "SELECT count(*) FROM checks WHERE run_id = ? AND stage = 'host'", (report.run_id,)
        )
        assert zdb_rows[0][0] == len(r.states)
        roles = st.execute("SELECT role FROM run_logs WHERE run_id = ?", (report.run_id,))
        assert sorted(x for (x,) in roles) == ["vdev0", "vdev1", "vdev2"]
