"""End to end, for real: a crash run checks each distinct state once, and a second run of
the same recording takes every verdict from the first without booting a check guest.

A workload recorded twice is two logs (mkfs draws a new UUID, the clock moves on), so the
second run is handed the first run's recording, as a resumed run would find it in its
own directory; everything after the recording is the ordinary run.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.check import guest as guestcheck
from harness.config import scenario
from harness.crashstate import recording
from harness.experiments import lifecycle
from harness.image import build as image
from harness.outcome import HARNESS, Outcome
from harness.store.db import Store

pytestmark = pytest.mark.vm
SETS = ["workload.ops=40", "crash.max_states=16", "check.guest_batch=16"]
RECORDING = ("log.raw", "recording.json", "oracle.json")


def verdicts(db: Path, run_id: str) -> dict[str, str]:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (run_id,))
    return dict(rows.fetchall())


def test_a_second_run_of_the_same_log_checks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if image.cached() is None:
        pytest.skip("guest image not built")
    db = tmp_path / "lab.sqlite"
    sc = scenario.load("ext4-ordered-fsync", SETS)
    first = lifecycle.execute(sc, db=db)
    one = first.summary["reuse"]
    assert one["generated"] == first.items == 16 and one["checked"] == one["distinct"]
    assert one["checked"] + one["reused"] == 16
    assert not {Outcome(v) for v in verdicts(db, first.run_id).values()} & HARNESS

    real = recording.recorded

    def the_first_recording(sc: Any, rdir: Path, *args: Any) -> Any:
        rdir.mkdir(parents=True, exist_ok=True)
        for name in RECORDING:
            shutil.copy(lifecycle.run_dir(first.run_id) / name, rdir / name)
        return real(sc, rdir, *args)

    batches: list[int] = []
    real_batch = guestcheck.check_batch

    def count_batches(items: Any, *args: Any, **kw: Any) -> Any:
        batches.append(len(items))
        return real_batch(items, *args, **kw)

    monkeypatch.setattr(recording, "recorded", the_first_recording)
    monkeypatch.setattr(guestcheck, "check_batch", count_batches)
    second = lifecycle.execute(sc, db=db, fresh=True)
    assert second.run_id != first.run_id
    assert second.summary["reuse"] == {
        "generated": 16,
        "distinct": one["distinct"],
        "checked": 0,
        "reused": 16,
    }
    assert batches == []  # no check guest booted
    assert verdicts(db, second.run_id) == verdicts(db, first.run_id)
    assert second.counts == first.counts
    with Store.open(db) as st:
        detail = st.run_detail(second.run_id)
    for s in detail.states:
        assert {c.checker for c in s.checks} == {"reused"}
        assert all(first.run_id in c.output for c in s.checks)
