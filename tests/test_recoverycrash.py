"""A crash during recovery, the pure parts: which states' recovery is recorded, how a
recovery log is cut, that its states are judged as the state they recover, the scenario
keys, and the parent link in the store. The guest run is in test_recoverycrash_vm.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.check import host as check
from harness.config import scenario
from harness.crashstate import checking as states
from harness.crashstate import onelog, recoverycrash
from harness.errors import HarnessError, InputError
from harness.outcome import Outcome
from harness.record import recovery
from harness.record.logwrites import FUA, open_log
from harness.replay import crashstates, replayer
from harness.store.db import LogInfo, Store
from tests.logbuilder import LogBuilder


def state(
    sid: str, prefix: int, mark: str = "crashlab:sync:1", index: int = 0
) -> crashstates.CrashState:
    return crashstates.CrashState(sid, "log", prefix, mark=mark, mark_index=index)


def test_parents_are_a_seeded_sample_of_the_consistent_states_in_log_order() -> None:
    cut = [state(f"s{i}", i) for i in range(10)]
    outcomes = {f"s{i}": Outcome.CONSISTENT for i in range(10)}
    outcomes |= {"s3": Outcome.DATA_LOSS, "s5": Outcome.HARNESS_ERROR}
    picked = recoverycrash.pick_parents(cut, outcomes, 3, seed=1)
    assert len(picked) == 3 and not {"s3", "s5"} & {p.id for p in picked}
    assert [p.prefix for p in picked] == sorted(p.prefix for p in picked)
    assert picked == recoverycrash.pick_parents(cut, outcomes, 3, seed=1)
    draws = {
        tuple(p.id for p in recoverycrash.pick_parents(cut, outcomes, 3, seed=s)) for s in range(8)
    }
    assert len(draws) > 1  # the seed draws
    # fewer eligible than asked: all of them; unjudged states are never parents
    assert [p.id for p in recoverycrash.pick_parents(cut, outcomes, 50, 1)] == [
        f"s{i}" for i in range(10) if i not in (3, 5)
    ]
    assert recoverycrash.pick_parents(cut, {}, 3, 1) == []


def recovery_log(path: Path) -> Path:
    """A recovery recording's shape: the image copied (mkfs-like writes, a flush), the
    base mark, the journal replay (two FUA writes), done, unmounted."""
    b = LogBuilder()
    b.write(0, b"\x01" * 4096).write(64, b"\x02" * 4096).flush().mark(recovery.BASE_MARK)
    b.write(128, b"\x03" * 4096).write(8, b"\x04" * 4096, FUA)
    b.write(16, b"\x05" * 4096, FUA).mark(recovery.DONE_MARK)
    b.write(24, b"\x06" * 4096).flush().mark("crashlab:umount")
    return b.build(path)


def test_a_recovery_log_is_cut_after_its_base_at_fuas_and_marks(tmp_path: Path) -> None:
    with open_log(recovery_log(tmp_path / "log.raw")) as lg:
        base = lg.find_mark(recovery.BASE_MARK)
        assert base is not None
        cut = recoverycrash.cut(lg, seed=1, most=20)
        prefixes = [s.prefix for s in cut]
        # the base itself (the parent's image), after each FUA, after each later mark
        assert prefixes == [base + 1, base + 3, base + 4, base + 5, base + 8]
        assert {s.generator for s in cut} == {"fua", "mark"}
        # the state at the base mark is the copied image: every write before it
        img = replayer.materialize(lg, cut[0], tmp_path / "base.img", 1 << 20)
        data = img.read_bytes()
        assert data[:4096] == b"\x01" * 4096 and data[64 * 512 : 72 * 512] == b"\x02" * 4096
        assert data[128 * 512 : 136 * 512] == bytes(4096)
        assert [s.prefix for s in recoverycrash.cut(lg, 1, 2)] == [base + 1, base + 8]
    plain = LogBuilder().write(0, b"\x01" * 512, FUA).mark("crashlab:mkfs").build(tmp_path / "p")
    with open_log(plain) as lg, pytest.raises(HarnessError, match="not a recovery log"):
        recoverycrash.cut(lg, 1, 5)


def test_recovery_states_are_judged_as_their_parent(tmp_path: Path) -> None:
    parent = state("parent", 40, "crashlab:sync:3", 38)
    assert parent.exact is False
    exact_parent = state("exact", 39, "crashlab:sync:3", 38)
    assert exact_parent.exact
    with open_log(recovery_log(tmp_path / "log.raw")) as lg:
        cut = recoverycrash.cut(lg, 1, 20)
        for judged in (parent, exact_parent):
            src = states.Source(lg, cut, {}, 1 << 20, "rc", judged_as=judged)
            batch = states._Batch(tmp_path / "batch", None, 60.0)  # type: ignore[arg-type]
            sc = SimpleNamespace(crash=SimpleNamespace(corrupt="none"))
            image = tmp_path / "img"
            image.write_bytes(bytes(4096))
            for s in cut:
                batch.add(sc, None, src, states.Checked(s, []), image, None)  # type: ignore[arg-type]
            # the oracle reads the parent's mark and exactness, never the recovery's marks
            assert {(i.mark, i.exact) for i in batch.items} == {(judged.mark, judged.exact)}
            assert [i.key for i in batch.items] == [s.id for s in cut]
            batch.close()
        plain = states.Source(lg, cut, {}, 1 << 20, "plain")
        assert plain.judge(cut[-1]) is cut[-1]


def test_recovery_crash_keys_and_their_bad_values() -> None:
    sc = scenario.load("ext4-ordered-fsync", ["recovery_crash.sample=3"])
    assert sc.recovery_crash.sample == 3 and sc.resolved()["recovery_crash"]["sample"] == 3
    # off: stored as before the key existed, so earlier runs resume
    assert "recovery_crash" not in scenario.load("ext4-ordered-fsync").resolved()
    for name, extra, words in (
        ("ext4-ordered-fsync", ["check.guest=false"], "check.guest = true"),
        ("ext4-ordered-fsync", ["recovery_crash.max_states=0"], "at least 1"),
    ):
        with pytest.raises(InputError) as e:
            scenario.load(name, ["recovery_crash.sample=1", *extra])
        said = f"{e.value.message} {e.value.hint} {e.value.detail}"
        assert words in said and "recovery_crash" in said, said


def test_the_recovery_recorded_is_the_mount_or_without_a_journal_the_full_fsck() -> None:
    for name, argv in (
        (
            "ext4-ordered-fsync",
            ["mount", "-t", "ext4", "-o", "data=ordered", "/dev/x", "/mnt/test"],
        ),
        ("xfs-fsync", ["mount", "-t", "xfs", "/dev/x", "/mnt/test"]),
        ("ext2-fsync", ["e2fsck", "-f", "-y", "/dev/x"]),
        ("ext4-nojournal-fsync", ["e2fsck", "-f", "-y", "/dev/x"]),
    ):
        sc = scenario.load(name, ["recovery_crash.sample=1"])
        assert recovery.recovery_argv(sc.fs, "/dev/x") == argv, name
    # where fsck is the recovery, its repaired states are parents too (their expected verdict)
    cut = [state("a", 1), state("b", 2)]
    outcomes = {"a": Outcome.REPAIRED, "b": Outcome.CONSISTENT}
    assert [p.id for p in recoverycrash.pick_parents(cut, outcomes, 5, 1)] == ["b"]
    assert [p.id for p in recoverycrash.pick_parents(cut, outcomes, 5, 1, fsck_recovers=True)] == [
        "a",
        "b",
    ]


def test_a_recovery_crash_state_is_stored_with_its_parent(tmp_path: Path) -> None:
    with Store.open(tmp_path / "lab.sqlite") as st:
        run_id = st.begin_run("s", "crash", {}, 1)
        st.add_log(LogInfo("log", "log", 1, 0, 0, 0, 0, 0), run_id=run_id)
        ok = check.CheckResult("guest", "mount+verify", Outcome.CONSISTENT, 0, 1.0, "")
        child = state("child", 7)
        onelog.commit_state(st, run_id, states.Checked(state("parent", 5), [ok]))
        onelog.commit_state(st, run_id, states.Checked(child, [ok]), parent="parent")
        rows = {s.id: s for s in st.run_detail(run_id).states}
    assert rows["child"].parent == "parent" and rows["parent"].parent is None
    assert rows["child"].description.startswith("crash during the recovery of parent: ")
    assert rows["child"].to_json()["parent"] == "parent"


def test_a_search_states_half_id_is_refused_naming_the_whole(tmp_path: Path) -> None:
    # A search run prints WORKLOAD/STATE; given the STATE half, triage said only "no
    # crash state" (seen this session: seq2-019403/e5b71e9ce1dedec5 given as e5b71e9c...).
    from harness.crashstate import stored

    db = tmp_path / "lab.sqlite"
    with Store.open(db) as st:
        run_id = st.begin_run("s", "search", {}, 1)
        st.add_log(LogInfo("log", "log", 1, 0, 0, 0, 0, 0), run_id=run_id)
        ok = check.CheckResult("guest", "mount+verify", Outcome.CONSISTENT, 0, 1.0, "")
        onelog.commit_state(st, run_id, states.Checked(state("seq2-019403/e5b71e9ce1de", 5), [ok]))
    with pytest.raises(InputError) as e:
        stored.stored_state("e5b71e9c", db)
    assert "did you mean seq2-019403/e5b71e9ce1de?" in str(e.value.hint)
    with pytest.raises(InputError) as e:
        stored.stored_state("0000dead", db)
    assert e.value.hint == "ids are listed by: scenario results show RUN"
