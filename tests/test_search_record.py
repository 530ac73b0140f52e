"""A recorded log kept small: a workload's log cut out of its batch's log disk, and a
recorder's log device trimmed -- byte for byte, with the zeros the guest wrote as holes."""

from __future__ import annotations

import os
from pathlib import Path

from harness.crashstate import workloads as record
from harness.record import logwrites, recorder
from harness.record.logwrites import FUA
from tests.logbuilder import LogBuilder

MiB = 1 << 20


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_cut_log_reads_back_whole_and_keeps_written_zeros_as_holes(tmp_path: Path) -> None:
    # A batch's log disk as the guest leaves it: a hole, then a workload's slice with
    # a header sector, 6 MiB of zeros the guest wrote (mkfs.xfs zeroing its journal) and
    # data that ends off a 4 KiB boundary.
    src = tmp_path / "batch-log.raw"
    offset, length = 3 * MiB + 512, 10 * MiB
    header, data = os.urandom(512), os.urandom(3 * 4096 + 100)
    with open(src, "wb") as f:
        f.truncate(offset + length + MiB)
        f.seek(offset)
        f.write(header + bytes(6 * MiB) + data)
    assert _allocated(src) > 6 * MiB  # the zeros were written, as the guest's are
    dst = tmp_path / "log.raw"
    record.cut_region(src, offset, length, dst)
    with open(src, "rb") as f:
        f.seek(offset)
        want = f.read(length)
    assert dst.read_bytes() == want
    assert _allocated(dst) <= 64 * 1024, _allocated(dst)


def test_a_cut_of_data_alone_is_copied_whole(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.raw", tmp_path / "dst.raw"
    body = os.urandom(MiB + 7)
    src.write_bytes(body)
    record.cut_region(src, 0, len(body), dst)
    assert dst.read_bytes() == body


def test_a_recorded_log_is_trimmed_to_its_entries_and_its_written_zeros_dug_out(
    tmp_path: Path,
) -> None:
    # A log device as a guest leaves it: the log (with a 4 MiB write of zeros, as
    # mkfs.xfs zeroes its journal), then the device's sparse rest, larger than the log.
    body = (
        LogBuilder()
        .mark("crashlab:mkfs")
        .write(0, bytes(4 * MiB))
        .write(8192, os.urandom(4096), FUA)
        .mark("crashlab:sync:1")
        .to_bytes()
    )
    dev = tmp_path / "log.raw"
    with open(dev, "wb") as f:
        f.write(body)
        f.truncate(64 * MiB)
    recorder.trim_log(dev)
    assert dev.read_bytes() == body
    assert _allocated(dev) <= 64 * 1024, _allocated(dev)
    with logwrites.open_log(dev) as lg:
        assert list(lg.marks.values()) == ["crashlab:mkfs", "crashlab:sync:1"]
        assert bytes(lg.data(lg.entries[1])) == bytes(4 * MiB)
