"""Logs written by QEMU's blklogwrites: counted while growing, marks inserted afterwards."""

from __future__ import annotations

from pathlib import Path

from logbuilder import LogBuilder

from harness.record import blklogwrites, logwrites


def test_count_and_insert_marks(tmp_path: Path) -> None:
    b = LogBuilder()
    b.write(8, b"a" * 512).write(16, b"b" * 1024).flush().discard(0, 8).write(24, b"c" * 512)
    path = tmp_path / "log.raw"
    # QEMU leaves nr_entries stale until a flush; the tail of the device is zeroes.
    path.write_bytes(b.to_bytes(nr_entries=0) + bytes(4096))
    assert blklogwrites.count_entries(path) == 5

    blklogwrites.insert_marks(path, [(0, "crashlab:mkfs"), (3, "crashlab:sync:1"), (5, "end")])
    with logwrites.open_log(path) as lg:
        assert len(lg.entries) == 8
        assert dict(lg.marks) == {0: "crashlab:mkfs", 4: "crashlab:sync:1", 7: "end"}
        writes = [e for e in lg.entries if e.is_write]
        assert [bytes(lg.data(e))[:1] for e in writes] == [b"a", b"b", b"c"]
        assert sum(e.is_discard for e in lg.entries) == 1
