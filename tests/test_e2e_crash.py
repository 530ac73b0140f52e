"""End to end, for real: boot a guest, record ext4 on dm-log-writes, cut crash states,
check them on the host and in a guest, and find the verdicts in SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.check import guest as guestcheck
from harness.config import scenario
from harness.crashstate import stored
from harness.experiments import lifecycle
from harness.image import build as image
from harness.outcome import HARNESS, Outcome

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[lifecycle.Report, Path]:
    if image.cached() is None:
        pytest.skip("guest image not built")
    db = tmp_path_factory.mktemp("e2e") / "lab.sqlite"
    sc = scenario.load(
        "ext4-ordered-fsync", ["workload.ops=60", "crash.max_states=6", "check.guest_batch=6"]
    )
    return lifecycle.execute(sc, db=db), db


def test_every_state_has_a_verdict_and_no_harness_failure(
    small_run: tuple[lifecycle.Report, Path],
) -> None:
    report, db = small_run
    assert report.items == 6
    con = sqlite3.connect(db)
    verdicts = dict(
        con.execute(
            "SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (report.run_id,)
        ).fetchall()
    )
    assert len(verdicts) == 6
    assert not {Outcome(v) for v in verdicts.values()} & HARNESS, verdicts
    # Both stages ran for every state: e2fsck on the host, mount + oracle in the guest.
    stages = con.execute(
        "SELECT stage, count(*) FROM checks WHERE run_id = ? GROUP BY stage", (report.run_id,)
    ).fetchall()
    assert dict(stages) == {"host": 6, "guest": 6}
    phases = {
        p
        for (p,) in con.execute(
            "SELECT DISTINCT phase FROM recovery_times WHERE run_id = ?", (report.run_id,)
        )
    }
    assert {"journal_replay", "fsck", "mount", "fsck_after"} <= phases
    log = con.execute("SELECT entries, fuas, marks FROM logs").fetchone()
    assert log[0] > 100 and log[1] > 0 and log[2] >= 3


def test_resume_redoes_nothing(small_run: tuple[lifecycle.Report, Path]) -> None:
    report, db = small_run
    sc = scenario.load(
        "ext4-ordered-fsync", ["workload.ops=60", "crash.max_states=6", "check.guest_batch=6"]
    )
    # The run finished, so a new one starts; mark it unfinished to see a resume skip all.
    con = sqlite3.connect(db)
    con.execute("UPDATE runs SET status = 'interrupted' WHERE id = ?", (report.run_id,))
    con.commit()
    again = lifecycle.execute(sc, db=db)
    assert again.run_id == report.run_id and again.resumed
    assert again.earlier == 6 and again.counts == report.counts  # counted from the store
    n = con.execute("SELECT count(*) FROM verdicts WHERE run_id = ?", (report.run_id,)).fetchone()
    assert n[0] == 6


def test_oracle_has_teeth(small_run: tuple[lifecycle.Report, Path], tmp_path: Path) -> None:
    """The earliest crash state, checked against the *final* mark's oracle, must be
    data_loss: files written later cannot be there. A check that cannot fail is no check."""
    report, db = small_run
    con = sqlite3.connect(db)
    sid = con.execute(
        "SELECT id FROM crash_states WHERE run_id = ? ORDER BY prefix LIMIT 1", (report.run_id,)
    ).fetchone()[0]
    img, _ = stored.reproduce(sid, db=db, out=tmp_path / "state.img")
    oracle = json.loads((lifecycle.run_dir(report.run_id) / "oracle.json").read_text())
    final = oracle["final_mark"]
    required = next(m for m in oracle["marks"] if m["mark"] == final)
    assert required["files"], "seed 1 with 60 ops leaves files: the test needs some"
    sc = scenario.load("ext4-ordered-fsync")
    results = list(
        guestcheck.check_batch([guestcheck.Item(sid, img, final)], sc.fs, {"": oracle}, timeout=120)
    )
    assert [[r.outcome for r in rs] for _, rs in results] == [[Outcome.DATA_LOSS]]


def test_qemu_blklogwrites_recorder(tmp_path: Path) -> None:
    """The second recorder: QEMU logs on the host; no FUA, marks only between guest commands."""
    if image.cached() is None:
        pytest.skip("guest image not built")
    sc = scenario.load(
        "ext4-ordered-fsync",
        [
            "recorder.type=qemu-blklogwrites",
            "workload.ops=30",
            "crash.states=[{kind='flush'}, {kind='mark'}]",
            "crash.max_states=4",
        ],
    )
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    con = sqlite3.connect(tmp_path / "lab.sqlite")
    fuas, marks = con.execute("SELECT fuas, marks FROM logs").fetchone()
    assert fuas == 0 and marks == 3  # mkfs, the workload's final sync, umount
    outcomes = {Outcome(v) for (v,) in con.execute("SELECT outcome FROM verdicts")}
    assert report.items == 4 and not outcomes & HARNESS


def test_an_op_generator_family_is_what_the_guest_ran(tmp_path: Path) -> None:
    """workload.family on the op generator, in a real guest: the oracle keeps the seed
    the guest drew (not the run's, whose 20 ops hold no held-descriptor fsync), its ops
    are of the family, and they are the ops the host draws again from that seed."""
    from harness.model import families, generate

    if image.cached() is None:
        pytest.skip("guest image not built")
    sets = ["workload.ops=20", "workload.files=8", "workload.max_size=64K",
            "workload.extended=true", "workload.bug_ops=true", "workload.family=held-fd",
            "crash.states=[{kind='mark'}]"]  # fmt: skip
    sc = scenario.load("ext4-ordered-fsync", sets)
    drawn_first = generate.draw(sc.seed, 20, 8, 65536, True, True, True)
    assert not families.matches_ops("held-fd", drawn_first)
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    assert report.status in (0, 1), report.counts  # a finding is ext4's; no harness failure
    oracle = json.loads((lifecycle.run_dir(report.run_id) / "oracle.json").read_text())
    assert oracle["family"] == "held-fd" and oracle["seed"] != sc.seed
    drawn = generate.draw(oracle["seed"], 20, 8, 65536, True, True, True)
    assert families.matches_ops("held-fd", drawn)
    assert [o["op"] for o in oracle["ops"] if not o.get("final")] == [op.kind for op in drawn]
