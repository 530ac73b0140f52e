"""The soak's plan and its morning checks (harness/campaign/soak.py, soakcheck.py) on a
store the lab itself creates, rows written as a night would leave them. The nights
themselves, with real guests and real faults, are tests/test_soak_vm.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.campaign import soak, soakcheck, soakfaults
from harness.store.db import Store

STAMP = "2026-12-07T00:00:00.000+00:00"


def test_the_first_night_is_clean_and_every_fault_comes_once_then_at_random() -> None:
    once = soak.plan(7, list(soakfaults.FAULTS), seed=1, extra=0)
    assert once[0] == [] and sorted(f for n in once for f in n) == sorted(soakfaults.FAULTS)
    more = soak.plan(7, list(soakfaults.FAULTS), seed=1, extra=0.5)
    assert more[0] == [] and sum(map(len, more)) > sum(map(len, once))
    assert soak.plan(7, list(soakfaults.FAULTS), seed=1, extra=0.5) == more  # seeded


def night(db: Path, run_ids: list[str], verdict: str = "consistent") -> None:
    """One campaign whose elements ran ``run_ids``, each run with one judged state."""
    Store.open(db, create=True).close()
    with sqlite3.connect(db) as con:
        con.execute(
            "INSERT INTO campaigns (id, name, path, spec_hash, spec, started_at, status)"
            " VALUES ('c1', 'soak-ci', 'x', 'h', '{}', ?, 'done')",
            (STAMP,),
        )
        for i, rid in enumerate(run_ids):
            con.execute(
                "INSERT OR IGNORE INTO runs (id, scenario, kind, params, started_at, status)"
                " VALUES (?, 's', 'crash', '{}', ?, 'done')",
                (rid, STAMP),
            )
            con.execute(
                "INSERT INTO campaign_elements (campaign_id, key, position, scenario,"
                " overrides, status, run_id) VALUES ('c1', ?, ?, 's', '[]', 'done', ?)",
                (f"k{i}", i, rid),
            )
            con.execute(
                "INSERT OR REPLACE INTO verdicts (run_id, state_id, outcome, decided_at)"
                " VALUES (?, 'st', ?, ?)",
                (rid, verdict, STAMP),
            )


def test_a_sound_night_passes_every_check(tmp_path: Path) -> None:
    night(tmp_path / "lab.sqlite", ["r1", "r2"])
    st = soakcheck.Store(tmp_path / "lab.sqlite")
    assert st.integrity() == "ok"
    cid = st.last_campaign("soak-ci")
    assert cid == "c1" and st.elements(cid) == {"done": 2} and st.twice(cid) == 0
    assert st.kept({"r1/st": "consistent"}, st.verdicts()) == 0 and st.problems == []


def test_a_run_counted_twice_and_a_verdict_changed_are_problems(tmp_path: Path) -> None:
    night(tmp_path / "lab.sqlite", ["r1", "r1"], verdict="data_loss")
    st = soakcheck.Store(tmp_path / "lab.sqlite")
    assert st.twice("c1") == 1
    assert st.kept({"r1/st": "consistent", "gone/st": "data_loss"}, st.verdicts()) == 2
    assert len(st.problems) == 2 and "lost or changed" in st.problems[1]
