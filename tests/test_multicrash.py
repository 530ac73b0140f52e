"""Multi-disk crash states (harness/replay/multicrash.py) on synthetic logs, and the ZFS crash
experiment's pure parts: its oracle, its verdicts, its scenario keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from logbuilder import MKFS_MARK, LogBuilder

from harness import paths
from harness.check import zpool as parse
from harness.config import scenario
from harness.errors import InputError
from harness.experiments.zfs import crash
from harness.experiments.zfs import record as zfs_record
from harness.experiments.zfs.settings import Experiment, ZfsScenario
from harness.model.contract import ZfsRound
from harness.outcome import Outcome
from harness.record.logwrites import FLUSH, FUA, Log, open_log
from harness.replay.honest import intervals, label_regions
from harness.replay.multicrash import (
    MultiState,
    common_marks,
    consistent_cuts,
    cut_points,
    generate,
    is_honest,
    multi_state_id,
    torn_across,
)


def disk_log(k: int, flushes: int = 2) -> LogBuilder:
    """A vdev's log: label writes, mkfs mark, then two synced rounds with ``flushes``
    FLUSH points each (k shifts the data so every disk's log differs)."""
    b = LogBuilder()
    b.write(0, bytes([k]) * 1024).flush().mark(MKFS_MARK)
    for n in (1, 2):
        for f in range(flushes):
            b.write(8 * (n * 4 + f), bytes([k + n + f]) * 512)
            b.flush()
        b.write(64 + n, bytes([n]) * 512, FUA)
        b.mark(f"crashlab:zsync:{n}")
    return b


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[list[Log]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(open_log(disk_log(k, flushes=k + 1).build(tmp_path / f"l{k}")))
            for k in range(3)
        ]


def test_common_marks_index_every_log(logs: list[Log]) -> None:
    marks = common_marks(logs)
    assert [t for t, _ in marks] == [MKFS_MARK, "crashlab:zsync:1", "crashlab:zsync:2"]
    for text, idx in marks:
        for lg, i in zip(logs, idx, strict=True):
            assert lg.marks[i] == text


def test_consistent_cuts_are_just_after_each_common_mark(logs: list[Log]) -> None:
    states = consistent_cuts(logs)
    assert len(states) == 3
    for s, (text, idx) in zip(states, common_marks(logs), strict=True):
        assert s.consistent and s.mark == text
        assert s.cuts == tuple(i + 1 for i in idx)
        assert s.id == multi_state_id([lg.hash for lg in logs], s.cuts)


def test_cut_points_at_flushes_or_every_entry(logs: list[Log]) -> None:
    lg = logs[2]  # 3 flushes per round
    (_, a), (_, b) = common_marks(logs)[1:3]
    lo, hi = a[2], b[2]
    pts = cut_points(lg, lo, hi, "flush")
    assert pts[0] == lo + 1 and pts[-1] == hi
    inner = pts[1:-1]
    assert inner and all(lg.flags[p - 1] & (FLUSH | FUA) for p in inner)
    assert cut_points(lg, lo, hi, "entry") == list(range(lo + 1, hi + 1))


def test_torn_across_cuts_stay_between_two_common_marks(logs: list[Log]) -> None:
    marks = common_marks(logs)
    states = torn_across(logs, seed=3, per_interval=5, max_states=100, model="any")
    assert states
    bounds = {t: (lo, hi) for (t, lo), (_, hi) in itertools.pairwise(marks)}
    for s in states:
        assert not s.consistent
        lo, hi = bounds[s.mark]
        assert all(a + 1 <= c <= b for c, a, b in zip(s.cuts, lo, hi, strict=True))
        # never every disk at one of the marks: that is a consistent cut
        assert s.cuts not in (tuple(a + 1 for a in lo), tuple(hi))
    per_mark = {t: sum(1 for s in states if s.mark == t) for t in bounds}
    assert all(n <= 5 for n in per_mark.values())


def test_torn_across_is_seeded_and_capped(logs: list[Log]) -> None:
    a = torn_across(logs, seed=1, per_interval=6, max_states=4, model="any")
    assert [s.id for s in a] == [
        s.id for s in torn_across(logs, seed=1, per_interval=6, max_states=4, model="any")
    ]
    assert len(a) == 4


def test_torn_across_exhaustive_when_small(tmp_path: Path) -> None:
    # One flush per round on 2 disks: 3 candidate cuts each, 9 combinations, 2 consistent.
    with ExitStack() as stack:
        logs = [
            stack.enter_context(open_log(disk_log(k, flushes=1).build(tmp_path / f"s{k}")))
            for k in range(2)
        ]
        states = torn_across(logs, per_interval=100, max_states=100, model="any")
        assert sum(1 for s in states if s.mark == "crashlab:zsync:1") == 9 - 2


def test_generate_union_without_duplicates(logs: list[Log]) -> None:
    states = generate(logs, [{"kind": "consistent"}, {"kind": "torn-across", "per_interval": 2}])
    assert len({s.id for s in states}) == len(states)
    assert [s.consistent for s in states][:3] == [True, True, True]
    with pytest.raises(InputError, match="unknown kind"):
        generate(logs, [{"kind": "nope"}])
    with pytest.raises(InputError, match="unknown key"):
        generate(logs, [{"kind": "consistent", "n": 1}])
    with pytest.raises(InputError, match="points"):
        generate(logs, [{"kind": "torn-across", "points": "fua"}])
    with pytest.raises(InputError, match="per_interval"):
        generate(logs, [{"kind": "torn-across", "per_interval": 0}])


def test_ids_are_content_addresses(logs: list[Log]) -> None:
    h = [lg.hash for lg in logs]
    assert multi_state_id(h, [5, 6, 7]) == multi_state_id(list(h), (5, 6, 7))
    assert multi_state_id(h, [5, 6, 7]) != multi_state_id(h, [5, 7, 6])
    assert multi_state_id(h, [5, 6, 7]) != multi_state_id(h[::-1], [5, 6, 7])
    s = consistent_cuts(logs)[1]
    assert MultiState.from_dict(s.to_dict()) == s
    d = s.to_dict() | {"cuts": [1, 2, 3]}
    with pytest.raises(InputError, match="does not match"):
        MultiState.from_dict(d)
    with pytest.raises(InputError, match="malformed"):
        MultiState.from_dict({"id": "x"})
    # each disk's image is an ordinary single-log prefix state
    d0 = s.disk_state(0)
    assert d0.prefix == s.cuts[0] and d0.log_hash == h[0] and not d0.dropped


def test_marks_must_agree(tmp_path: Path) -> None:
    a = LogBuilder().write(0, b"a" * 512).mark(MKFS_MARK).mark("crashlab:zsync:1")
    a.mark("crashlab:zsync:2")
    b = LogBuilder().write(0, b"b" * 512).mark(MKFS_MARK).mark("crashlab:zsync:2")
    b.mark("crashlab:zsync:1")
    no_mkfs = LogBuilder().write(0, b"c" * 512)
    with ExitStack() as stack:
        la = stack.enter_context(open_log(a.build(tmp_path / "a")))
        lb = stack.enter_context(open_log(b.build(tmp_path / "b")))
        lc = stack.enter_context(open_log(no_mkfs.build(tmp_path / "c")))
        with pytest.raises(InputError, match="another order"):
            common_marks([la, lb])
        with pytest.raises(InputError, match="no 'crashlab:mkfs'"):
            common_marks([la, lc])
        with pytest.raises(InputError, match="at least one log"):
            common_marks([])


def test_required_at_marks_excludes_what_the_next_round_touches() -> None:
    rounds = [
        ZfsRound(round=1, files={"f000": "a", "f001": "b"}, touched=["f000", "f001"]),
        ZfsRound(round=2, files={"f000": "c", "f001": "b"}, touched=["f000"]),
        ZfsRound(round=3, files={"f000": "c"}, touched=["f001"]),
    ]
    req = zfs_record.required_at_marks(rounds)
    assert req[MKFS_MARK] == {}
    assert req["crashlab:zsync:1"] == {"f001": "b"}
    assert req["crashlab:zsync:2"] == {"f000": "c"}
    assert req["crashlab:zsync:3"] == {"f000": "c"}


def _status(processed: int = 0, cksum: int = 0, errors: int = 0) -> parse.PoolStatus:
    scan = parse.ScanStats("SCRUB", "FINISHED", 1, 2, 0, 0, 0, processed, 0, 0)
    leaf = parse.VdevErrors("d0", "disk", "ONLINE", None, 0, 0, cksum, 0, 0, True)
    return parse.PoolStatus("tank", "ONLINE", scan, (leaf,), errors)


def test_judge() -> None:
    ok = {"ok": True, "checked": 2}
    assert crash.judge(True, _status(), True, ok) is Outcome.CONSISTENT
    assert crash.judge(False, None, False, None) is Outcome.UNREPAIRABLE
    assert crash.judge(True, _status(processed=4096), True, ok) is Outcome.REPAIRED
    assert crash.judge(True, _status(cksum=3), True, ok) is Outcome.REPAIRED
    assert crash.judge(True, _status(errors=1), True, ok) is Outcome.UNREPAIRABLE
    assert crash.judge(True, _status(), True, {"ok": False}) is Outcome.DATA_LOSS
    assert crash.judge(True, _status(), True, None) is Outcome.DATA_LOSS
    assert crash.judge(True, _status(), False, None) is Outcome.UNREPAIRABLE


def test_crash_scenario_loads_and_rejects_bad_keys() -> None:
    path = paths.REPO / "scenarios" / "zfs-crash-raidz1.toml"
    sc = scenario.load(path)
    assert isinstance(sc, ZfsScenario) and sc.experiment is Experiment.CRASH
    assert sc.crash is not None and sc.crash.state_specs()[0] == {"kind": "consistent"}
    assert scenario.load(path, ("crash.rounds=2",)).crash.rounds == 2  # type: ignore[union-attr]
    for bad, match in (
        ("crash.rounds=0", "at least 1"),
        ("crash.points=fua", "not one of"),
        ("crash.torn_per_interval=-1", "must be at least 0"),
        ("fault=wipe", "no fault"),
        ("fill=20", "no fill"),
    ):
        with pytest.raises(InputError, match=match):
            scenario.load(path, (bad,))
    scrub = paths.REPO / "scenarios" / "scrub-zero-1disk.toml"
    with pytest.raises(InputError, match="only experiment = 'crash'"):
        scenario.load(scrub, ("crash.rounds=2",))


def test_judge_rewound_import_is_repaired_at_best() -> None:
    ok = {"ok": True, "checked": 1}
    assert crash.judge(True, _status(), True, ok, rewound=True) is Outcome.REPAIRED
    assert crash.judge(True, _status(), True, {"ok": False}, rewound=True) is Outcome.DATA_LOSS


# --- the honest model, on logs shaped like ZFS's txg commit ----------------------------

VDEV = 8 << 20  # bytes; labels in the first and last 512 KiB
UB_SECTORS = (256, 768, (VDEV >> 9) - 768, (VDEV >> 9) - 256)  # uberblock slot in L0..L3


def zfs_log(k: int, txgs: tuple[int, ...] = (1, 1), *, back_only: bool = False) -> LogBuilder:
    """A vdev's log as dm-log-writes records a single-top-level pool: per round, ``n``
    txgs each ``data, FLUSH (pre-label), uberblocks, FLUSH``; a mark after each round."""
    b = LogBuilder().write(0, bytes([k]) * 1024).flush().mark(MKFS_MARK)
    for r, n in enumerate(txgs, 1):
        for t in range(n):
            b.write(8192 + 64 * (4 * r + t), bytes([k + r + t]) * 4096)
            b.flush()
            for sec in UB_SECTORS[2:] if back_only else UB_SECTORS:
                b.write(sec, bytes([r + t]) * 1024)
            b.flush()
        b.mark(f"crashlab:zsync:{r}")
    return b


def _open(stack: ExitStack, tmp_path: Path, builders: list[LogBuilder]) -> list[Log]:
    return [
        stack.enter_context(open_log(b.build(tmp_path / f"z{k}"))) for k, b in enumerate(builders)
    ]


def _flushes(lg: Log, lo: int, hi: int) -> list[int]:
    return [i for i in range(lo + 1, hi) if lg.flags[i] & FLUSH]


def test_label_write_without_the_others_pre_label_flush_is_a_lying_disk(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k) for k in range(3)])
        (_, lo), (_, hi) = common_marks(logs)[1:3]
        pre = [_flushes(lg, a, b)[0] for lg, a, b in zip(logs, lo, hi, strict=True)]
        # disk 0 holds its uberblocks; disk 1 stops before its pre-label flush
        cuts = (hi[0], lo[1] + 1, pre[2] + 1)
        assert not is_honest(logs, cuts, VDEV)
        # the same with disk 1 past its pre-label flush: uberblocks may be unflushed
        assert is_honest(logs, (hi[0], pre[1] + 1, pre[2] + 1), VDEV)
        # nobody past a label write: no cross-disk edge, any data may be lost
        assert is_honest(logs, (pre[0] + 1, lo[1] + 1, lo[2] + 1), VDEV)
        st = {s.cuts: s for s in torn_across(logs, per_interval=100, model="any")}
        assert st[cuts].model == "lying-disk" and not st[cuts].honest
        assert "lying-disk" in st[cuts].describe()
        assert MultiState.from_dict(st[cuts].to_dict()) == st[cuts]
        assert cuts not in {s.cuts for s in torn_across(logs, per_interval=100)}


def test_every_label_run_is_a_barrier_not_only_the_first(tmp_path: Path) -> None:
    # Two txgs between the marks: disk 0 holds the second txg's uberblocks while disk 1
    # lacks data it flushed for that txg (it passed only the first txg's barrier).
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k, (2, 1)) for k in range(2)])
        (_, lo), (_, hi) = common_marks(logs)[0:2]
        f1 = _flushes(logs[1], lo[1], hi[1])  # pre1, post1, pre2, post2
        assert len(f1) == 4
        assert not is_honest(logs, (hi[0], f1[1] + 1), VDEV)
        assert is_honest(logs, (hi[0], f1[2] + 1), VDEV)


def test_back_labels_count_as_label_writes(tmp_path: Path) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k, back_only=True) for k in range(2)])
        (_, lo), (_, hi) = common_marks(logs)[1:3]
        assert not is_honest(logs, (hi[0], lo[1] + 1), VDEV)
        # the usable size is rounded down to a whole label
        assert label_regions(VDEV) == ((0, 512 << 10), (VDEV - (512 << 10), VDEV))
        assert label_regions(VDEV + 4096) == label_regions(VDEV)


def test_unmatched_label_runs_vouch_for_nothing_past_a_label(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(0, (2, 1)), zfs_log(1, (1, 1))])
        (_, lo), (_, hi) = common_marks(logs)[0:2]
        assert not intervals(logs, common_marks(logs), VDEV)[0].matched
        assert "cannot be matched" in caplog.text
        assert not is_honest(logs, (hi[0], hi[1] - 1), VDEV)
        assert is_honest(logs, (lo[0] + 2, lo[1] + 1), VDEV)  # before any label write


def test_consistent_cuts_are_honest(tmp_path: Path) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k, (2, 1, 3)) for k in range(3)])
        states = consistent_cuts(logs)
        assert len(states) == 4
        for s in states:
            assert s.honest and s.model == "honest"
            assert is_honest(logs, s.cuts, VDEV)
        with pytest.raises(InputError, match="between two consecutive"):
            is_honest(logs, (1, 1, 1), VDEV)


@pytest.mark.parametrize("points", ["flush", "entry"])
def test_honest_model_keeps_ids_of_the_honest_states_any_draws(tmp_path: Path, points: str) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k, (2, 1, 3)) for k in range(3)])
        for per in (2, 4, 1000):  # sampled and exhaustive

            def draw(model: str, per: int = per) -> list[MultiState]:
                return torn_across(logs, 7, per, 10_000, points, model, VDEV)

            anyone, honest = draw("any"), draw("honest")
            assert all(s.honest for s in honest)
            assert any(not s.honest for s in anyone)
            by_cuts = {s.cuts: s.id for s in honest}
            for s in anyone:
                assert s.id == multi_state_id(s.log_hashes, s.cuts)
                assert s.honest == is_honest(logs, s.cuts, VDEV)
                if s.honest:
                    assert by_cuts.get(s.cuts) == s.id  # drawn again, same id
            if per == 1000 and points == "flush":  # small enough to enumerate
                assert {s.id for s in honest} == {s.id for s in anyone if s.honest}


def test_generate_and_spec_take_the_model(tmp_path: Path) -> None:
    with ExitStack() as stack:
        logs = _open(stack, tmp_path, [zfs_log(k) for k in range(2)])
        spec = {"kind": "torn-across", "per_interval": 100}
        assert all(s.honest for s in generate(logs, [spec], device_size=VDEV))
        everything = generate(logs, [spec | {"model": "any"}], device_size=VDEV)
        assert {s.honest for s in everything} == {True, False}
        with pytest.raises(InputError, match="model must be one of"):
            generate(logs, [spec | {"model": "lying"}])
    path = paths.REPO / "scenarios" / "zfs-crash-raidz1.toml"
    sc = scenario.load(path)
    assert sc.crash is not None and sc.crash.state_specs()[1]["model"] == "honest"  # type: ignore[union-attr]
    anyone = scenario.load(path, ("crash.torn_model=any",))
    assert anyone.crash.state_specs()[1]["model"] == "any"  # type: ignore[union-attr]
    with pytest.raises(InputError, match="not one of"):
        scenario.load(path, ("crash.torn_model=lying",))
