"""Application update patterns end to end in real guests, CI-sized (one target per case,
a handful of crash states): the workload records on dm-log-writes, every crash state is
mounted in a guest and each target classified, the classes land in the store and the
patterns table counts them. Also: the same recording gives the same states and classes
again, SQLite commits are checked in the guest, an unknown mount option is the
guest mount's message as bad input before any state is checked, and e4defrag
(EXT4_IOC_MOVE_EXT) defragments for real on the guest's ext4 -- never the host's, whose
kernel may refuse the ioctl."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness.config import crash, scenario
from harness.errors import InputError
from harness.experiments import lifecycle
from harness.guest import apppat
from harness.image import build as image
from harness.model import oracle
from harness.outcome import HARNESS, Outcome
from harness.record import recorder
from harness.report import patterns, query
from harness.store.db import Store
from harness.vm.backend import Disk, GuestSpec, start_guest

pytestmark = pytest.mark.vm

SMALL = ["workload.files=1", "crash.states=[{kind='fua'}, {kind='mark'}]"]


def classes(db: Path, run_id: str) -> dict[str, str]:
    with Store.open(db, create=False) as st:
        return {o["item"]: o["metrics"]["class"] for o in st.observations(run_id)}


@pytest.fixture(scope="module")
def rename_run(
    guest_image: image.Image, tmp_path_factory: pytest.TempPathFactory
) -> tuple[lifecycle.Report, Path]:
    db = tmp_path_factory.mktemp("patterns") / "lab.sqlite"
    sc = scenario.load("replace-rename", [*SMALL, "crash.max_states=8", "check.guest_batch=8"])
    return lifecycle.execute(sc, db=db), db


def test_every_state_classifies_the_targets_its_update_reached(
    rename_run: tuple[lifecycle.Report, Path],
) -> None:
    report, db = rename_run
    con = sqlite3.connect(db)
    verdicts = dict(
        con.execute("SELECT state_id, outcome FROM verdicts WHERE run_id = ?", (report.run_id,))
    )
    assert len(verdicts) == report.items == 8
    assert not {Outcome(v) for v in verdicts.values()} & HARNESS, verdicts
    got = classes(db, report.run_id)
    assert got and set(got.values()) <= set(apppat.CLASSES), got
    # The last state is cut after umount: the final sync made every target new.
    last = con.execute(
        "SELECT id FROM crash_states WHERE run_id = ? ORDER BY prefix DESC LIMIT 1",
        (report.run_id,),
    ).fetchone()[0]
    final = {item: c for item, c in got.items() if item.startswith(last + ":")}
    assert len(final) == len(apppat.CASES["replace-rename"])
    assert set(final.values()) == {"new"}, final
    # A promised target that is not new is exactly a state the oracle judged data_loss.
    with Store.open(db, create=False) as st:
        for o in st.observations(report.run_id):
            m = o["metrics"]
            if m["promised"] and m["class"] != "new":
                assert verdicts[m["state"]] == "data_loss", o


def test_the_patterns_table_counts_every_classification(
    rename_run: tuple[lifecycle.Report, Path],
) -> None:
    report, db = rename_run
    with Store.open(db, create=False) as st:
        table = query.grouped(st, "patterns", ["fs", "mount_options", "pattern"])
        lines = patterns.summary_lines(st, report.run_id)
    assert {g.key[:2] for g in table.groups} == {("ext4", "data=ordered")}
    assert {g.key[2] for g in table.groups} == {c for c, _ in apppat.CASES["replace-rename"]}
    assert sum(g.counted for g in table.groups) == len(classes(db, report.run_id))
    assert len(lines) == len(table.groups) and all(" of " in line for line in lines)


def test_the_same_recording_gives_the_same_states_and_classes(
    rename_run: tuple[lifecycle.Report, Path],
) -> None:
    """Forget three states' verdicts and classes and resume: the run cuts the same states
    from its kept log (same ids) and classifies them the same way in a new guest."""
    report, db = rename_run
    before = classes(db, report.run_id)
    con = sqlite3.connect(db)
    forget = [
        r[0]
        for r in con.execute(
            "SELECT id FROM crash_states WHERE run_id = ? ORDER BY prefix LIMIT 3 OFFSET 3",
            (report.run_id,),
        )
    ]
    for sid in forget:
        for table in ("verdicts", "checks", "recovery_times"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ? AND state_id = ?",
                        (report.run_id, sid))  # fmt: skip
        con.execute("DELETE FROM observations WHERE run_id = ? AND item LIKE ?",
                    (report.run_id, sid + ":%"))  # fmt: skip
    con.execute("UPDATE runs SET status = 'interrupted' WHERE id = ?", (report.run_id,))
    con.commit()
    sc = scenario.load("replace-rename", [*SMALL, "crash.max_states=8", "check.guest_batch=8"])
    again = lifecycle.execute(sc, db=db)
    assert again.run_id == report.run_id and again.earlier == 5 and again.items == 8
    assert classes(db, report.run_id) == before


def test_sqlite_commits_are_checked_in_the_guest(guest_image: image.Image, tmp_path: Path) -> None:
    sc = scenario.load(
        "sqlite-commit",
        [*SMALL, "workload.transactions=2", "crash.max_states=6", "check.guest_batch=6"],
    )
    report = lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    with Store.open(tmp_path / "lab.sqlite", create=False) as st:
        obs = st.observations(report.run_id)
        outcomes = {Outcome(o) for o in st.outcome_counts(report.run_id)}
        last = st.execute(
            "SELECT id FROM crash_states WHERE run_id = ? ORDER BY prefix DESC LIMIT 1",
            (report.run_id,),
        )[0][0]
    assert not outcomes & HARNESS
    assert {o["cell"]["target"] for o in obs} == {
        f"{m.lower()}-{s.lower()}.db" for m in ("DELETE", "TRUNCATE", "WAL")
        for s in ("OFF", "NORMAL", "FULL", "EXTRA")
    }  # fmt: skip
    # The last state (after umount) holds both transactions of every database, intact.
    final = [o["metrics"] for o in obs if o["metrics"]["state"] == last]
    assert len(final) == 12
    assert all(m["class"] == "committed" and m["integrity"] == ["ok"] for m in final), final


def test_an_unknown_mount_option_is_bad_input_before_any_state(
    guest_image: image.Image, tmp_path: Path
) -> None:
    sc = scenario.load("replace-rename", [*SMALL, "fs.mount_options=no_such_option"])
    with pytest.raises(InputError) as e:
        lifecycle.execute(sc, db=tmp_path / "lab.sqlite")
    assert "fs.mount_options" in e.value.message and "no_such_option" in e.value.message
    con = sqlite3.connect(tmp_path / "lab.sqlite")
    assert con.execute("SELECT count(*) FROM verdicts").fetchone() == (0,)


def test_e4defrag_moves_every_extent_and_keeps_every_file_required(
    guest_image: image.Image, tmp_path: Path
) -> None:
    """Seed 004's online defragmentation in one guest, on defrag-crash's ext4 (no crash
    image: the pattern run once, then checked as a crash state is): ROUNDS interleaved
    fsync'd appends leave each file in several extents, e4defrag leaves fewer, and rule 11
    keeps every file required, whole, from the setup's sync on -- across the
    defragmentation's interval, not only after it."""
    sc = scenario.load("defrag-crash")
    assert isinstance(sc, crash.Scenario)
    fs = sc.fs
    disk = tmp_path / "scratch.raw"
    with open(disk, "wb") as f:
        f.truncate(fs.disk_size)
    mnt, path = recorder.MOUNTPOINT, f"{recorder.GUEST_DIR}/oracle.json"
    with start_guest(GuestSpec(disks=(Disk(disk, "scratch"),))) as guest:
        recorder.install_scripts(guest)
        dev = guest.disk("scratch")
        guest.run(fs.mkfs_argv(dev), check=True)
        guest.run(fs.mount_argv(dev, mnt), check=True)
        argv = ["python3", f"{recorder.GUEST_DIR}/apppat.py", "--pattern", "e4defrag"]
        argv += ["--root", mnt, "--seed", "3", "--files", "3", "--size", "131072"]
        r = guest.run([*argv, "--mark-cmd", "none", "--oracle", path], timeout=600)
        assert r.ok, r.out + r.err
        o = json.loads(guest.read_file(path))
        guest.run(["umount", mnt], check=True)
        first_defrag = min(t["first_op"] for t in o["targets"])
        setup = max((m for m in o["marks"] if m["after_op"] < first_defrag), key=lambda m: m["n"])
        # The files read back from the disk by the guest's own check of a crash state:
        # mount, the oracle's verify and the classes at that mark, umount, e2fsck.
        facts: dict[str, dict[str, Any]] = {}
        for mark in ("crashlab:umount", setup["mark"]):
            check = ["python3", f"{recorder.GUEST_DIR}/checkstate.py", "--dev", dev]
            check += ["--fs", "ext4", "--oracle", path, "--mark", mark]
            facts[mark] = json.loads(guest.run(check, check=True).out)
    before, after = o["layout"]["before"]["extents"], o["layout"]["after"]["extents"]
    assert set(before) == {t["path"] for t in o["targets"]} and len(before) == 3
    assert all(before[p] >= 2 and after[p] < before[p] for p in before), (before, after)
    final = facts["crashlab:umount"]
    assert final["mount"]["rc"] == 0 and not final["verify_error"], final
    assert {c["class"] for c in final["classes"]} == {"new"}, final["classes"]
    assert all(c["promised"] for c in final["classes"]) and len(final["classes"]) == 3
    during = oracle.requirements(o, setup["mark"], False)
    assert during is not None and set(during["files"]) == set(before)  # none exempted
    at_setup = facts[setup["mark"]]
    assert at_setup["verify"] and at_setup["verify"]["ok"], at_setup
