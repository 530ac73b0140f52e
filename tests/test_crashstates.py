from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from logbuilder import MKFS_MARK, LogBuilder, random_builder

from harness.errors import InputError
from harness.record.logwrites import FLUSH, FUA, Log, open_log
from harness.replay.crashstates import (
    KINDS,
    CrashState,
    at_flushes,
    at_fuas,
    at_marks,
    at_percent,
    every,
    generate,
    reorder,
    start_after,
    torn,
)

ALL_SPECS: list[dict[str, object]] = [
    {"kind": "flush"},
    {"kind": "fua"},
    {"kind": "mark"},
    {"kind": "every", "n": 7},
    {"kind": "percent", "at": [0, 10, 50, 90, 100]},
    {"kind": "reorder", "max_states": 200, "per_point": 8},
    {"kind": "torn", "max_states": 40},
]


@pytest.fixture
def rlog(tmp_path: Path) -> Iterator[Log]:
    b = random_builder(random.Random(7), 300, 1024, mkfs_at=20)
    with open_log(b.build(tmp_path / "log")) as log:
        yield log


def epoch_log(tmp_path: Path) -> Log:
    """0-1 mkfs writes, flush, mkfs mark, then an epoch of w4 w5(FUA) w6 d7, flush f8,
    w9 w10, mark 11."""
    b = LogBuilder()
    b.write(0, b"m" * 1024).write(8, b"m" * 512).flush().mark(MKFS_MARK)
    b.write(16, b"a" * 4096).write(24, b"b" * 512, FUA).write(32, b"c" * 8192)
    b.discard(0, 2).flush().write(40, b"d" * 512).write(48, b"e" * 512)
    b.mark("crashlab:sync:1")
    return open_log(b.build(tmp_path / "elog"))


def test_prefix_generators(tmp_path: Path) -> None:
    with epoch_log(tmp_path) as log:
        assert [s.prefix for s in at_flushes(log)] == [9]  # flush 2 is before mkfs
        assert [s.prefix for s in at_fuas(log)] == [6]
        marks = at_marks(log)
        assert [s.prefix for s in marks] == [4, 12]
        assert [(s.mark, s.mark_index, s.sync) for s in marks] == [
            (MKFS_MARK, 3, None),
            ("crashlab:sync:1", 11, 1),
        ]
        assert [s.prefix for s in every(log, 3)] == [7, 10]
        assert [s.prefix for s in at_percent(log, [0, 50, 100])] == [4, 8, 12]
        for s in at_flushes(log) + every(log, 3):
            assert s.dropped == () and s.torn is None


def test_reorder_epochs(tmp_path: Path) -> None:
    with epoch_log(tmp_path) as log:
        states = reorder(log, per_point=100)
        by_prefix: dict[int, set[tuple[int, ...]]] = {}
        for s in states:
            by_prefix.setdefault(s.prefix, set()).add(s.dropped)
        # Crash before flush 8: any non-empty subset of {4, 6, 7} (5 is FUA, 0-1 are
        # before mkfs). At the end of the log: subsets of {9, 10}; the flush covers 4-7.
        assert by_prefix == {
            8: {(4,), (6,), (7,), (4, 6), (4, 7), (6, 7), (4, 6, 7)},
            12: {(9,), (10,), (9, 10)},
        }
        assert all(s.mark == "crashlab:sync:1" for s in states if s.prefix == 12)
        assert all(s.mark == MKFS_MARK for s in states if s.prefix == 8)
        # Sampling past the exhaustive limit keeps singletons and stays within bounds.
        few = reorder(log, per_point=3)
        assert {s.dropped for s in few if s.prefix == 8} == {(4,), (6,), (7,)}
        assert len(reorder(log, max_states=4)) == 4


def test_torn_states(tmp_path: Path) -> None:
    with epoch_log(tmp_path) as log:
        states = torn(log)
        # Multi-sector writes after mkfs: entries 4 (8 sectors) and 6 (16 sectors).
        assert {s.torn for s in states} == {4, 6}
        for s in states:
            assert s.torn is not None and s.prefix == s.torn + 1
            nr = log.entries[s.torn].nr_sectors
            kept = sum(c for _, c in s.torn_runs)
            assert 0 < kept < nr
            assert all(a >= 0 and a + c <= nr for a, c in s.torn_runs)
        halves = torn(log, modes=["half"])
        assert {(s.torn, s.torn_runs) for s in halves} == {(4, ((0, 4),)), (6, ((0, 8),))}
        blocks = [s for s in torn(log, modes=["blocks"]) if s.torn == 6]
        assert all(a % 8 == 0 and c == 8 for s in blocks for a, c in s.torn_runs)
        assert torn(log, only=["fua"]) == []  # the only FUA write is one sector


def test_no_state_before_mkfs(rlog: Log) -> None:
    mkfs = rlog.find_mark(MKFS_MARK)
    assert mkfs is not None
    states = generate(rlog, ALL_SPECS, seed=3)
    assert states
    assert {s.generator for s in states} == {
        "flush",
        "fua",
        "mark",
        "every",
        "percent",
        "reorder",
        "torn",
    }
    for s in states:
        assert s.prefix > mkfs
        assert all(i > mkfs for i in s.dropped)
        assert s.torn is None or s.torn > mkfs
        assert s.mark is not None and s.mark_index is not None and s.mark_index < s.prefix
    assert [s.prefix for s in states] == sorted(s.prefix for s in states)
    assert len({s.id for s in states}) == len(states)


def test_reorder_only_drops_volatile_entries(rlog: Log) -> None:
    flushes = [e.index for e in rlog.entries if e.flags & FLUSH]
    for s in reorder(rlog, max_states=500):
        last_flush = max((f for f in flushes if f < s.prefix), default=0)
        for i in s.dropped:
            e = rlog.entries[i]
            assert i >= last_flush and not e.is_fua and (e.is_write or e.is_discard)


def test_ids_stable_and_sensitive(tmp_path: Path) -> None:
    b = random_builder(random.Random(11), 200, 1024, mkfs_at=5)
    p1 = b.build(tmp_path / "a")
    p2 = b.build(tmp_path / "b")
    with open_log(p1) as l1, open_log(p2) as l2:
        a = generate(l1, ALL_SPECS, seed=1)
        assert [s.to_dict() for s in a] == [s.to_dict() for s in generate(l2, ALL_SPECS, seed=1)]
        # A sampled generator with another seed, or other parameters, gives other states.
        r1 = {s.id for s in reorder(l1, seed=1, max_states=20, per_point=4)}
        assert r1 != {s.id for s in reorder(l1, seed=2, max_states=20, per_point=4)}
        assert r1 != {s.id for s in reorder(l1, seed=1, max_states=20, per_point=5)}
        t1 = {s.id for s in torn(l1, seed=1, max_states=10)}
        assert t1 != {s.id for s in torn(l1, seed=2, max_states=10)}
    # Another log (one byte of data differs) gives other ids.
    raw = bytearray(p1.read_bytes())
    raw[-1] ^= 0xFF
    p1.write_bytes(bytes(raw))
    with open_log(p1) as l3:
        assert {s.id for s in generate(l3, ALL_SPECS, seed=1)}.isdisjoint(s.id for s in a)


def test_generate_dedups_across_specs(rlog: Log) -> None:
    once = generate(rlog, [{"kind": "flush"}])
    twice = generate(rlog, [{"kind": "flush"}, {"kind": "flush"}, {"kind": "every", "n": 1}])
    assert {s.id for s in once} <= {s.id for s in twice}
    mkfs = rlog.find_mark(MKFS_MARK)
    assert mkfs is not None
    # every n=1 yields prefixes mkfs+2 .. len; no flush directly follows the mkfs mark.
    assert len(twice) == len({s.id for s in twice}) == len(rlog.entries) - mkfs - 1


def test_dict_roundtrip(rlog: Log) -> None:
    for s in generate(rlog, ALL_SPECS, seed=5):
        d = json.loads(json.dumps(s.to_dict()))
        assert CrashState.from_dict(d) == s
        assert s.id in s.describe()
    # A search's states carry their workload's name before the content hash, and travel to
    # host-check workers as records like any other (a run of 80 workloads failed on it).
    first = generate(rlog, [{"kind": "fua"}])[0]
    named = dataclasses.replace(first, id=f"seq1-000007/{first.id}")
    assert CrashState.from_dict(json.loads(json.dumps(named.to_dict()))) == named
    d = generate(rlog, [{"kind": "reorder"}])[0].to_dict()
    d["dropped"] = []
    with pytest.raises(InputError, match="does not match its content"):
        CrashState.from_dict(d)
    del d["prefix"]
    with pytest.raises(InputError, match="malformed crash state record"):
        CrashState.from_dict(d)


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"kind": "nope"}, "'state.kind' = 'nope': not one of " + ", ".join(KINDS)),
        ({}, "missing required key 'state.kind'"),
        ({"kind": "every"}, "missing required key 'state.n'"),
        ({"kind": "every", "n": 0}, "'state.n' = 0: must be at least 1"),
        ({"kind": "every", "n": "x"}, "'state.n' = 'x': expected an integer"),
        ({"kind": "percent", "at": [10, 120]}, "'state.at[1]' = 120: must be at most 100"),
        ({"kind": "fua", "n": 3}, "unknown key 'state.n'"),
        ({"kind": "torn", "modes": ["sideways"]}, "'state.modes[0]' = 'sideways': not one of"),
        ({"kind": "reorder", "max_states": -1}, "'state.max_states' = -1: must be at least 1"),
    ],
)
def test_bad_specs(rlog: Log, spec: dict[str, object], message: str) -> None:
    with pytest.raises(InputError) as exc:
        generate(rlog, [{"kind": "fua"}, spec])
    assert "spec #2" in str(exc.value) and message in str(exc.value)


def test_log_without_mkfs_mark(tmp_path: Path) -> None:
    path = LogBuilder().write(0, b"x" * 512).flush().build(tmp_path / "l")
    with open_log(path) as log, pytest.raises(InputError, match="no 'crashlab:mkfs' mark"):
        generate(log, [{"kind": "flush"}])


def test_states_start_after_a_named_mark_or_a_patterns_setup(tmp_path: Path) -> None:
    """``crash.after_mark``: the FUA before ``crashlab:sync:1`` is left out; 'setup' finds
    the sync mark before a pattern's first update (its targets' smallest ``start_n``)."""
    b = LogBuilder()
    b.write(0, b"m" * 1024).flush().mark(MKFS_MARK)
    b.write(16, b"a" * 512, FUA).mark("crashlab:sync:1")
    b.write(24, b"b" * 512, FUA).write(32, b"c" * 512, FUA).mark("crashlab:sync:2")
    with open_log(b.build(tmp_path / "l")) as log:
        assert start_after(log, MKFS_MARK) is None
        assert [s.prefix for s in generate(log, [{"kind": "fua"}])] == [4, 6, 7]
        at = start_after(log, "crashlab:sync:1")
        assert at == 4
        assert [s.prefix for s in generate(log, [{"kind": "fua"}], start=at)] == [6, 7]
        targets = [{"start_n": 2}, {"start_n": 1}]
        assert start_after(log, "setup", targets) == at
        with pytest.raises(InputError, match="not an application pattern"):
            start_after(log, "setup")
        with pytest.raises(InputError, match="no mark 'crashlab:sync:9'") as e:
            start_after(log, "crashlab:sync:9")
        assert "crashlab:sync:2" in str(e.value.hint)
