"""flakey-drop-remount: drop points, the two crash models' verdicts combined, the
scenario's bad input, and (vm) the whole experiment on a real guest with dm-flakey."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.experiments import lifecycle
from harness.experiments.faults.dropremount import (
    DropRemount,
    combine,
    drop_points,
    judge_drop,
    sync_points,
)
from harness.image import build as image
from harness.model.contract import EXCERPT, DropPoint
from harness.store.db import Store
from tests.guestfacts import command
from tests.guestfacts import facts as checked


def load(*sets: str) -> Any:
    return scenario.load("flakey-drop-remount", sets)


def test_sync_points_follow_the_seeded_workload() -> None:
    sc = load("workload.ops=40")
    n = sync_points(sc.workload, 1)
    assert n == sync_points(sc.workload, 1) and n >= 2  # the final sync is one
    assert n != sync_points(load("workload.ops=120").workload, 1)


def test_drop_points_are_seeded_and_within_the_workload() -> None:
    sc = load("drops=3")
    a, b = drop_points(sc, 7), drop_points(sc, 7)
    total = sync_points(sc.workload, 7)
    assert a == b and len(a) == 3 and all(1 <= k <= total for k in a)
    assert a == sorted(a)
    assert drop_points(load("drop_at=[2, 1, 2]"), 7) == [1, 2]


def test_a_drop_point_outside_the_workload_is_bad_input() -> None:
    sc = load("drop_at=[1, 9999]")
    with pytest.raises(InputError, match=r"drop_at.*9999.*outside the workload"):
        drop_points(sc, 1)


def test_zfs_and_small_disks_are_refused_before_a_guest_boots() -> None:
    with pytest.raises(
        InputError, match=r"filesystems\[0\]\.type.*replays .zfs. as a crash scenario"
    ):
        load('filesystems=[{type="zfs"}]')
    with pytest.raises(InputError, match=r"xfs needs a disk of at least 300M"):
        load('filesystems=[{type="xfs"}]', "disk_size=128M")
    with pytest.raises(InputError, match=r"fault\.mode"):
        load("fault.mode=drop_write")


def verdict(outcome: str) -> dict[str, Any]:
    return {"outcome": outcome}


def test_combined_verdict_keeps_findings_and_flags_disagreement() -> None:
    same = combine(verdict("consistent"), verdict("consistent"))
    assert same["agree"] is True and same["outcome"] == "consistent"
    differ = combine(verdict("consistent"), verdict("data_loss"))
    assert differ["agree"] is False and differ["outcome"] == "data_loss"
    # A harness failure of one model is not compared, and never reads as clean.
    broken = combine(verdict("consistent"), verdict("harness_error"))
    assert broken["agree"] is None and broken["outcome"] == "harness_error"
    kept = combine(verdict("data_loss"), verdict("timeout"))
    assert kept["agree"] is None and kept["outcome"] == "data_loss"
    alone = combine(verdict("repaired"), None)
    assert alone["agree"] is None and alone["outcome"] == "repaired"


def test_a_failed_setup_step_is_the_labs_not_a_finding() -> None:
    mkfs = command(rc=1, output="mkfs.ext4: bad option").as_step("mkfs")
    facts = DropPoint(at=3, mark="crashlab:sync:3", steps=[mkfs], failed="mkfs")
    r = judge_drop(facts)
    assert r["outcome"] == "harness_error" and "bad option" in r["error"]
    never = DropPoint(at=3, mark="crashlab:sync:3", steps=[], switched=False, check=checked())
    assert judge_drop(never)["outcome"] == "harness_error"


def test_drop_facts_are_judged_like_a_replayed_state() -> None:
    lost = {"ok": False, "missing": ["d0/f1"], "mark": "crashlab:sync:2"}
    facts = DropPoint(
        at=2, mark="crashlab:sync:2", steps=[], switched=True, check=checked(verify=lost)
    )
    r = judge_drop(facts)
    assert r["outcome"] == "data_loss" and "d0/f1" in r["note"] and r["seconds"] == 0.1
    facts = replace(facts, check=checked(verify={"ok": True}))
    assert judge_drop(facts)["outcome"] == "consistent"


@pytest.mark.vm
def test_drop_remount_agrees_with_crash_replay(guest_image: image.Image, tmp_path: Path) -> None:
    sc = load('filesystems=[{type="ext4"}]', "drops=2", "workload.ops=30", "disk_size=64M")
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    assert isinstance(r.experiment, DropRemount)
    with Store.open(db, create=False) as st:
        obs = st.observations(r.run_id)
    assert len(obs) == 2
    for o in obs:
        m = o["metrics"]
        assert m["drop"]["outcome"] == "consistent", m
        assert m["replay"]["outcome"] == "consistent", m
        assert m["agree"] is True
    assert r.status == 0
    # The end-of-run report, printed after the store is closed, as `scenario run` does.
    from rich.console import Console

    from harness.experiments.summary import print_summary

    console = Console(record=True, width=200)
    print_summary(console, r)
    assert "the two crash models agree on 2 of 2 points" in console.export_text()


@pytest.mark.vm
def test_drop_remount_positive_control_loses_data(guest_image: image.Image, tmp_path: Path) -> None:
    """A workload that never really fsyncs: both models must find the data gone."""
    sc = load(
        'filesystems=[{type="ext4"}]',
        "drop_at=[3]",
        "workload.ops=30",
        "workload.noop_sync=true",
        "expect=findings",
        "disk_size=64M",
    )
    db = tmp_path / "lab.sqlite"
    r = lifecycle.execute(sc, db=db)
    with Store.open(db, create=False) as st:
        (o,) = st.observations(r.run_id)
    assert o["metrics"]["drop"]["outcome"] == "data_loss", o["metrics"]
    assert o["metrics"]["replay"]["outcome"] == "data_loss", o["metrics"]
    assert r.status == 0 and not r.account.control_failed


def test_the_guest_program_reads_a_long_json_report_whole() -> None:
    """checkstate.py's JSON can run past the output tail kept for the record."""
    from harness.guest import dropremount as guest

    r = guest.runner.run(["python3", "-c", "import json; print(json.dumps({'x': 'y' * 5000}))"], 30)
    assert len(r.record().output) == EXCERPT and r.stdout.startswith('{"x"')
    assert len(r.stdout) > 5000


def test_the_faults_table_counts_verdicts_per_filesystem_and_fault(tmp_path: Path) -> None:
    from harness.outcome import Outcome
    from harness.report import faults as _registers  # noqa: F401
    from harness.report import query
    from harness.store.model import RunKind

    params = {"experiment": "flakey-drop-remount", "fault": {"mode": "drop_writes"}}
    with Store.open(tmp_path / "lab.sqlite") as st:
        run = st.begin_run("flakey-drop-remount", RunKind.FAULTS, params, 1)
        for fs, at, outcome, secs in (
            ("ext4", 2, Outcome.CONSISTENT, 0.1),
            ("ext4", 5, Outcome.DATA_LOSS, 0.3),
            ("xfs", 2, Outcome.CONSISTENT, 0.2),
        ):
            cell = {"type": fs, "name": fs, "at": at}
            metrics = {"seconds": secs, "agree": outcome is Outcome.CONSISTENT}
            st.record_observation(run, f"{fs} @sync:{at}", cell, metrics, outcome)
        table = query.grouped(st, "faults", ["fs", "fault"])
    groups = {g.key: g for g in table.groups}
    ext4 = groups[("ext4", "flakey-drop-remount drop_writes")]
    assert ext4.counted == 2 and dict(ext4.counts) == {"consistent": 1, "data_loss": 1}
    assert ext4.stats["seconds"].n == 2 and ext4.stats["seconds"].max == 0.3
    assert groups[("xfs", "flakey-drop-remount drop_writes")].counted == 1


def test_results_show_lists_the_items_of_an_observation_kind(tmp_path: Path) -> None:
    from rich.console import Console

    from harness.outcome import Outcome
    from harness.report import render
    from harness.store.model import RunKind

    with Store.open(tmp_path / "lab.sqlite") as st:
        run = st.begin_run("fsync-eio", RunKind.FAULTS, {}, 1)
        row = {"fsync-1": "EIO", "after remount": "old"}
        st.record_observation(run, "xfs", {"type": "xfs"}, {"row": row}, Outcome.CONSISTENT)
        detail = st.run_detail(run)
    assert dict(detail.run.outcome_counts) == {"consistent": 1}
    console = Console(record=True, width=200)
    render.print_detail(console, detail)
    text = console.export_text()
    assert "fsync-1 EIO" in text and "after remount old" in text and "consistent 1" in text
    assert detail.to_json()["items"][0]["item"] == "xfs"
