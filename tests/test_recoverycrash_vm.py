"""A crash during recovery in real guests, CI-sized: ext4-ordered-fsync with the recovery
of one consistent crash state recorded under dm-log-writes (its journal replayed at
mount), that log cut into FUA and mark states, each judged by the original cut's oracle
and stored with its parent."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import scenario
from harness.crashstate import stored
from harness.experiments import lifecycle
from harness.image import build as image
from harness.record import recovery
from harness.store.db import Store

pytestmark = pytest.mark.vm


def test_recovery_of_a_sampled_state_is_cut_and_each_state_still_recovers(
    guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load("ext4-ordered-fsync", ["recovery_crash.sample=1"])
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert r.status == 0 and set(r.counts) == {"consistent"}, r.counts
    s = r.summary
    assert s["recovery_crash"]["parents"] == 1 and s["recovery_crash"]["states"] >= 3, s
    with Store.open(db, create=False) as st:
        rows = st.run_detail(r.run_id).states
    children = [x for x in rows if x.parent]
    originals = {x.id: x for x in rows if not x.parent}
    assert len(children) == s["recovery_crash"]["states"] and len(originals) == s["states"]
    (parent_id,) = {c.parent for c in children}
    parent = originals[parent_id]
    assert parent.outcome == "consistent"
    assert all(c.outcome == "consistent" for c in children), [(c.id, c.outcome) for c in children]
    # judged as the parent in the guest, checked there unless a twin was
    assert all(
        c.checks and c.description.startswith(f"crash during the recovery of {parent_id}")
        for c in children
    )
    rdir = lifecycle.run_dir(r.run_id) / "recovery" / parent_id
    marks = {c.last_mark for c in children}
    assert {recovery.BASE_MARK, recovery.DONE_MARK} <= marks, marks
    # jbd2 ends its replay with a FUA write of the journal superblock: a crash right there
    assert any(c.generator == "fua" for c in children), [c.generator for c in children]
    # the state at the base mark is the parent's image byte for byte, so it took the
    # parent's verdict without a check (same identity, judged as the parent)
    base = next(c for c in children if c.last_mark == recovery.BASE_MARK and c.generator == "mark")
    with Store.open(db, create=False) as st:
        reused = st.execute(
            "SELECT reused_from FROM crash_states WHERE run_id = ? AND id = ?", (r.run_id, base.id)
        )
    assert reused == [(f"{r.run_id}/{parent_id}",)], reused
    assert (rdir / "log.raw").stat().st_size > 0 and not (rdir / "image.raw").exists()
    # reproduce finds a child's own log: at the base mark, the parent's bytes
    child_img, _ = stored.reproduce(base.id, db=db, out=tmp_path / "child.img")
    parent_img, _ = stored.reproduce(parent_id, db=db, out=tmp_path / "parent.img")
    assert child_img.read_bytes() == parent_img.read_bytes()
