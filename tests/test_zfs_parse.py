"""Parsers of `zpool events -v`, `zpool status -j --json-int`, `zpool list -Hp`, on outputs
recorded from the guest (tests/data/zfs/README.md says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.check import zpool as parse

DATA = Path(__file__).parent / "data" / "zfs"


def events(name: str) -> parse.Events:
    return parse.parse_events((DATA / name).read_text())


def test_time_is_seconds_and_nanoseconds_in_hex() -> None:
    assert parse.parse_time("0x6b026941 0x206cbe0a") == 0x6B026941 * 10**9 + 0x206CBE0A
    with pytest.raises(ValueError):
        parse.parse_time("0x6b026941")


def test_scrub_events() -> None:
    ev = events("events-scrub-raidz1.txt")
    assert ev.dropped == 682
    assert len(ev.of("sysevent.fs.zfs.scrub_start")) == 1
    # Nested nvlists (the detector) do not leak into the top-level fields.
    first = ev.of("ereport.fs.zfs.checksum")[0]
    assert first.fields["vdev_path"] == "/dev/disk/by-id/virtio-zd1-part1"
    assert "scheme" not in first.fields
    (w,) = parse.scan_windows(ev, "scrub")
    # 04:02:09.543997450 -> 04:02:15.467997173, as the header lines say.
    assert w.seconds == pytest.approx(5.923999723, abs=1e-9)
    assert parse.tick_ns(ev) == 4_000_000  # HZ=250: the coarse clock's tick


def test_resilver_events() -> None:
    ev = events("events-resilver-raidz1.txt")
    w = parse.overall(parse.scan_windows(ev, "resilver"))
    assert w.seconds == pytest.approx(29.451996519 - 18.959997009, abs=1e-9)
    assert ev.of("sysevent.fs.zfs.resilver_finish")[0].fields["resilver_type"] == "healing"
    assert parse.scan_windows(ev, "scrub") == []
    assert parse.overall([]) == parse.Window(None, None)


def test_each_scan_is_timed_on_its_own() -> None:
    # Two disks replaced: the second resilver is deferred until the first ends (issue 9
    # item 7: only the last one used to be timed).
    text = "\n".join(
        f"Nov 22 2026 04:02:0{i}.000000000 sysevent.fs.zfs.{cls}\n"
        f'        class = "sysevent.fs.zfs.{cls}"\n        time = 0x{i:x} 0x{n:x} \n'
        for i, cls, n in (
            (1, "scrub_start", 0),
            (2, "scrub_finish", 5),
            (3, "scrub_start", 7),
            (4, "scrub_finish", 500_000),
        )
    )
    first, second = parse.scan_windows(parse.parse_events(text), "scrub")
    assert (first.start_ns, first.finish_ns) == (1 * 10**9, 2 * 10**9 + 5)
    assert (second.start_ns, second.finish_ns) == (3 * 10**9 + 7, 4 * 10**9 + 500_000)
    assert second.seconds == pytest.approx(1.000499993)
    whole = parse.overall([first, second])
    assert whole.seconds == pytest.approx(3.0005)


def test_a_start_without_a_finish_is_not_timed() -> None:
    text = (
        "Nov 22 2026 04:02:01.000000000 sysevent.fs.zfs.resilver_start\n"
        '        class = "sysevent.fs.zfs.resilver_start"\n        time = 0x1 0x0 \n'
    )
    (w,) = parse.scan_windows(parse.parse_events(text), "resilver")
    assert w.seconds is None


def test_status_after_scrub() -> None:
    st = parse.parse_status((DATA / "status-scrub-raidz1.json").read_text(), "tank")
    assert st.state == "ONLINE" and st.error_count == 0
    assert st.scan is not None
    assert (st.scan.function, st.scan.state) == ("SCRUB", "FINISHED")
    assert st.scan.processed == 29868032 and st.scan.issued == 413630464
    assert st.scan.status_seconds == 6
    leaves = {v.name: v for v in st.leaves()}
    assert set(leaves) == {"virtio-zd0", "virtio-zd1", "virtio-zd2", "virtio-zd3"}
    assert leaves["virtio-zd1"].checksum == 722 and leaves["virtio-zd1"].self_healed == 29868032
    assert st.errors_json()["vdevs"]["raidz1-0"]["checksum"] == 0


def test_status_after_resilver() -> None:
    st = parse.parse_status((DATA / "status-resilver-raidz1.json").read_text(), "tank")
    assert st.scan is not None and st.scan.function == "RESILVER"
    assert st.scan.processed == 310714368
    assert "virtio-zd4" in {v.name for v in st.leaves()}


def test_status_of_another_pool_or_garbage_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse.parse_status((DATA / "status-scrub-raidz1.json").read_text(), "other")
    with pytest.raises(ValueError):
        parse.parse_status("cannot open 'tank': no such pool", "tank")


def test_status_without_json_int_takes_strings() -> None:
    text = (
        '{"pools":{"p":{"state":"DEGRADED","error_count":"3","scan_stats":{"function":"SCRUB",'
        '"state":"FINISHED","start_time":"10","end_time":"12","examined":"5","issued":"4",'
        '"processed":"1","errors":"2"},"vdevs":{}}}}'
    )
    st = parse.parse_status(text, "p")
    assert st.error_count == 3 and st.scan is not None and st.scan.status_seconds == 2


def test_list_and_used_available() -> None:
    pl = parse.parse_list((DATA / "list-raidz1.txt").read_text())
    assert (pl.size, pl.alloc, pl.cap, pl.health) == (1006632960, 415178752, 41, "ONLINE")
    assert parse.parse_used_available("used\t300778368\navailable\t296385664\n") == (
        300778368,
        296385664,
    )
    with pytest.raises(ValueError):
        parse.parse_list("tank 1 2")


def test_zdb_output_keeps_its_error_lines_and_a_disagreement_is_flagged() -> None:
    from harness.experiments.zfs import zdb
    from harness.experiments.zfs.crash import StateCheck
    from harness.outcome import Outcome

    noise = [f"\tdataset tank/{i}: ok" for i in range(200)]
    text = "\n".join(["Traversing all blocks ...", *noise[:100], "leaked space: vdev 0", *noise])
    short = zdb.summarize(text)
    assert short.startswith("leaked space: vdev 0") and short.endswith(noise[-1])
    assert len(short) <= 3000
    clean = zdb.ZdbCheck(True, 0, 0.5, "")
    dirty = zdb.ZdbCheck(False, 1, 0.5, "leaked space")
    assert not StateCheck(Outcome.CONSISTENT, 1, {}, "", zdb=clean).zdb_disagrees
    assert StateCheck(Outcome.CONSISTENT, 1, {}, "", zdb=dirty).zdb_disagrees
    assert StateCheck(Outcome.UNREPAIRABLE, 1, {}, "", zdb=clean).zdb_disagrees
    assert not StateCheck(Outcome.CONSISTENT, 1, {}, "").zdb_disagrees
