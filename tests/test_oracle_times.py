"""Rule 20 (harness/model/oracle/rules/times.py): mtime and ctime, where a whole-inode
commit promised them, must lie between what was made durable and the crash. The ops run
on real files (a tmp directory); a state is the tree as the run left it, with its times
moved by hand where a test wants one out of its window."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from harness.guest import opgen
from harness.model import oracle
from harness.model.ops import Op
from harness.model.oracle import rules, stamps
from harness.outcome import Outcome

SECOND = 10**9


def run(root: Path, ops: list[Op], **kw: Any) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    body = opgen.execute(str(root), ops, **kw)
    assert body["complete"], body["error"]
    return {"format": oracle.FORMAT, **body}


def entry(o: dict[str, Any], n: int) -> dict[str, Any]:
    return next(e for e in o["marks"] if e["mark"] == f"crashlab:sync:{n}")


def set_mtime(path: Path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def test_fsync_makes_the_times_durable_and_bounds_them(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("write", "a", data=b"x"), Op("fsync", "a")])
    first = entry(o, 1)
    low = first["files"]["a"]["times"]
    assert low["mtime"] == os.stat(root / "a").st_mtime_ns
    assert oracle.verify(str(root), o, first["mark"]).ok  # the tree as the run left it
    set_mtime(root / "a", first["until"] + SECOND)  # a time after the crash
    v = oracle.verify(str(root), o, first["mark"])
    assert not v.ok and v.mismatched[0].stamp is not None
    assert v.mismatched[0].stamp.which == "mtime" and v.mismatched[0].stamp.high == first["until"]
    assert rules.broken(v)[0].name == "times" and v.promise == "fsync-names"
    set_mtime(root / "a", low["mtime"] - SECOND)  # older than what the fsync made durable
    v = oracle.verify(str(root), o, first["mark"])
    assert not v.ok and v.mismatched[0].stamp is not None
    assert v.mismatched[0].stamp.low == low["mtime"]


def test_fdatasync_and_posix_fsync_leave_times_free(tmp_path: Path) -> None:
    ops = [Op("create", "a"), Op("write", "a", data=b"x"), Op("fdatasync", "a"), Op("fsync_dir")]
    o = run(tmp_path / "d", ops)
    assert "times" not in entry(o, 2)["files"]["a"]  # data integrity: no attributes
    ops = [Op("create", "a"), Op("write", "a", data=b"x"), Op("fsync", "a"), Op("fsync_dir")]
    o = run(tmp_path / "p", ops, fsync_names=False)
    assert "times" not in entry(o, 2)["files"]["a"]  # ext2: fsync commits no name or inode
    set_mtime(tmp_path / "p" / "a", 12345)
    assert oracle.verify(str(tmp_path / "p"), o, "crashlab:sync:2").ok


def test_sync_bounds_every_file_and_directory(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, [Op("mkdir", "d"), Op("create", "d/a"), Op("sync")])
    last = entry(o, 1)
    assert set(last["dir_times"]) == {"", "d"} and "times" in last["files"]["d/a"]
    assert oracle.verify(str(root), o, "crashlab:umount").ok
    set_mtime(root / "d", last["clock"] + SECOND)
    v = oracle.verify(str(root), o, "crashlab:umount")
    assert [m.path for m in v.mismatched] == ["d/"] and rules.broken(v)[0].number == 20


def test_a_cut_exactly_at_the_mark_is_bounded_by_that_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between mark 1 and mark 2 the file b is created: the root's mtime moves inside the
    # interval. A state cut anywhere before mark 2 may show it; one cut exactly at mark 1
    # holds nothing later than mark 1's clock. The kernel stamps b's create with its coarse
    # clock, which lags time_ns() by up to a tick (CI saw it read 1.2 ms before mark 1's
    # clock): each mark waits 50 ms, longer than a tick at any HZ, before the next op.
    placed = stamps.Stamps.mark

    def mark_then_wait(self: stamps.Stamps, model: Any, op: Any) -> None:
        placed(self, model, op)
        time.sleep(0.05)

    monkeypatch.setattr(stamps.Stamps, "mark", mark_then_wait)
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("sync"), Op("create", "b"), Op("fsync_dir")])
    first = entry(o, 1)
    inside = os.stat(root).st_mtime_ns  # the run's own last change of the root: b's create
    state = str(root)
    assert first["clock"] < inside <= first["until"]
    assert oracle.verify(state, o, first["mark"]).ok
    v = oracle.verify(state, o, first["mark"], exact=True)
    assert not v.ok and [m.path for m in v.mismatched] == ["/"]


def test_utimes_may_set_the_time_back(tmp_path: Path) -> None:
    # utimes (touch -d @...) sets mtime far in the past: after a commit of the old value
    # the committed value no longer bounds mtime from below; ctime still moves forward.
    root = tmp_path / "r"
    ops = [Op("create", "a"), Op("fsync", "a"), Op("utimes", "a", offset=5), Op("fsync_dir")]
    o = run(root, ops)
    low = entry(o, 2)["files"]["a"]["times"]
    assert low["mtime"] is None and low["ctime"] is not None
    assert oracle.verify(str(root), o, "crashlab:sync:2").ok


def test_an_oracle_without_clocks_checks_no_time(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("fsync", "a")])
    for e in o["marks"]:
        del e["until"], e["clock"]
    set_mtime(root / "a", 1)
    assert oracle.verify(str(root), o, "crashlab:sync:1").ok


def test_check_times_false_sends_an_untimed_copy(tmp_path: Path) -> None:
    # A scenario's check.times = false (f2fs's data control): the same tree, its time out
    # of the window, passes once the clocks are gone; the run's own document is unchanged.
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("write", "a", data=b"x"), Op("fsync", "a")])
    set_mtime(root / "a", entry(o, 1)["until"] + SECOND)
    assert not oracle.verify(str(root), o, "crashlab:sync:1").ok
    assert oracle.verify(str(root), oracle.untimed(o), "crashlab:sync:1").ok
    assert "until" in entry(o, 1)


def test_a_lost_time_names_the_finding_only_when_nothing_else_was_lost() -> None:
    from harness.model.contract import Mismatch, Stamp, Verdict

    stamp = Mismatch(path="/", stamp=Stamp(which="mtime", got=1, low=2, high=3))
    bytes_ = Mismatch(path="a", expected="e0", got="9f", size=1, expected_size=2)
    both = Verdict(mark="m", exact=True, known=True, checked=2, mismatched=[stamp, bytes_],
                   ok=False)  # fmt: skip
    assert rules.broken(both) == (rules.RULES["content"], "a")
    alone = Verdict(mark="m", exact=True, known=True, checked=2, mismatched=[stamp], ok=False)
    assert rules.broken(alone) == (rules.RULES["times"], "/")


def test_triage_keeps_the_loss_not_a_lost_time() -> None:
    from harness.triage import symptom

    lost = symptom.Symptom(
        Outcome.DATA_LOSS,
        frozenset({(symptom.RULES["missing"], "f2"), (symptom.RULES["stamp"], "/")}),
    )
    only_time = symptom.Symptom(Outcome.DATA_LOSS, frozenset({(symptom.RULES["stamp"], "/")}))
    assert not only_time.same_way(lost)  # the root's mtime is no stand-in for f2
    assert lost.same_way(only_time)  # when times were all the original lost, they count
    note = '{"mark": "m", "mismatched": [{"path": "/", "stamp": {"which": "mtime"}}]}'
    assert symptom.findings(note) == {(symptom.RULES["stamp"], "/")}


def test_a_shutdown_s_times_are_read_before_it(tmp_path: Path) -> None:
    # xfs answers every stat after a shutdown with EIO: what the shutdown commits is read
    # just before it (it changes no time), and the mark after it takes that reading.
    from harness.model.oracle.marks import Tracker

    root = tmp_path / "r"
    root.mkdir()
    (root / "a").write_bytes(b"x")
    track = Tracker(fsync_names=True, root=str(root))
    track.after(Op("create", "a"))
    before = os.stat(root / "a").st_mtime_ns
    op = Op("shutdown_logflush")
    track.before(op)
    set_mtime(root / "a", before + SECOND)  # what a stat after the shutdown cannot see
    track.after(op)
    track.mark("crashlab:sync:1", 1)
    ino = track.model.files["a"].ino
    assert track.stamps is not None and track.stamps.durable[ino]["mtime"] == before
