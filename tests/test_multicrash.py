"""Multi-disk crash states (faults/multicrash.py) on synthetic logs, and the ZFS crash
experiment's pure parts: its oracle, its verdicts, its scenario keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from logbuilder import MKFS_MARK, LogBuilder

from faults.multicrash import (
    MultiState,
    common_marks,
    consistent_cuts,
    cut_points,
    generate,
    multi_state_id,
    torn_across,
)
from harness import paths, scenario
from harness.errors import InputError
from harness.logwrites import FLUSH, FUA, Log, open_log
from harness.outcome import Outcome
from harness.zfs import crash, parse
from harness.zfs.spec import Experiment, ZfsScenario


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
        {"round": 1, "files": {"f000": "a", "f001": "b"}, "touched": ["f000", "f001"]},
        {"round": 2, "files": {"f000": "c", "f001": "b"}, "touched": ["f000"]},
        {"round": 3, "files": {"f000": "c"}, "touched": ["f001"]},
    ]
    req = crash.required_at_marks(rounds)
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
        ("crash.torn_per_interval=-1", "0 \\(none\\)"),
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
