"""A failing state as its base plus differing writes (harness/triage/delta.py), on the
recorded fixture's log: every generator's state is the candidate with all its items,
its base the one with none, and candidates keep the state's mark and cut."""

from __future__ import annotations

from harness.record.logwrites import Log
from harness.replay import crashstates
from harness.triage import delta

MKFS = 86  # the fixture's crashlab:mkfs mark (tests/data/logs/README.md)


def content(s: crashstates.CrashState) -> tuple[object, ...]:
    return (s.prefix, s.dropped, s.torn, s.torn_runs)


def test_every_kind_rebuilds_its_state_and_its_base(ext4_small_log: Log) -> None:
    lg = ext4_small_log
    states = crashstates.generate(lg, [{"kind": "fua"}, {"kind": "reorder"}, {"kind": "torn"}], 1)
    kinds = set()
    for s in states:
        d = delta.of(lg, s, MKFS)
        kinds.add(d.kind)
        full = d.candidate(d.items)
        assert full.id == s.id and content(full) == content(s)  # ids are content addresses
        assert d.candidate(()).id == d.base.id
        assert (full.mark, full.mark_index) == (s.mark, s.mark_index)
        assert all(c.prefix == s.prefix for c in (full, d.base))
    assert kinds == {"includes", "drops", "tears"}


def test_a_prefix_state_differs_by_the_writes_since_the_last_cut_with_writes(
    ext4_small_log: Log,
) -> None:
    lg = ext4_small_log
    # The FUA state after sync:6 (prefix 161) ends with transaction 6's commit block
    # (entry 160); entry 159 is a bare FLUSH|FUA, so its cut is the base: the commit
    # block is the only difference.
    assert delta.base_cut(lg, 161, MKFS) == 160
    state = next(s for s in crashstates.at_fuas(lg, 1) if s.prefix == 161)
    assert delta.of(lg, state, MKFS).items == (160,)
    # The mark sync:6 itself (prefix 151): a bare FLUSH (149) is no cut, so the base is
    # the cut after mark sync:5 (entry 145) and the differing writes are 146..148.
    assert delta.base_cut(lg, 151, MKFS) == 146
    d = delta.of(lg, crashstates.at_fuas(lg, 1)[-1], MKFS)
    assert all(lg.entries[i].is_write or lg.entries[i].is_discard for i in d.items)
    assert d.base.dropped == d.items and d.candidate(d.items[:1]).dropped == d.items[1:]


def test_a_torn_write_is_taken_apart_in_the_units_it_was_torn_in(ext4_small_log: Log) -> None:
    lg = ext4_small_log
    torn = [s for s in crashstates.torn(lg, 1, modes=("blocks",)) if len(s.torn_runs) > 1]
    s = torn[0]
    d = delta.of(lg, s, MKFS)
    assert sum(c for _, c in d.pieces()) == sum(c for _, c in s.torn_runs)
    one = d.candidate(d.items[:1])
    assert one.torn == s.torn and one.torn_runs == (d.pieces()[0],)
    assert d.entries(d.items[:1]) == [s.torn] and d.entries(()) == []
