"""JFS, ReiserFS and F2FS in crash replay for real, CI-sized: recorded on dm-log-writes in
a guest, each state checked by the filesystem's own host checker (on a copy, for those
that replay their log) and mounted in a guest with the oracle. Every state gets a
verdict, none of them the lab's own failure, and both stages ran for each."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import filesystems
from harness.config import scenario
from harness.experiments import lifecycle
from harness.image import build as image
from harness.outcome import HARNESS, Outcome
from harness.store.db import Store

pytestmark = pytest.mark.vm

STATES = 5


@pytest.mark.parametrize("fs", ["jfs", "reiserfs", "f2fs"])
def test_a_small_crash_run_is_judged_by_both_stages(
    fs: str, guest_image: image.Image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLAB_RESULTS", str(tmp_path / "results"))
    sc = scenario.load(
        f"{fs}-fsync",
        ["workload.ops=40", f"crash.max_states={STATES}", f"check.guest_batch={STATES}"],
    )
    r = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    assert r.items == STATES, r.counts
    assert not {Outcome(o) for o in r.counts} & HARNESS, r.counts
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        detail = st.run_detail(r.run_id)
    stages = sorted((c.stage, c.checker) for s in detail.states for c in s.checks)
    host = filesystems.get(fs).checker
    assert [s for s, _ in stages] == ["guest"] * STATES + ["host"] * STATES, stages
    assert {c for s, c in stages if s == "host"} == {host}
