from __future__ import annotations

import hashlib
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logbuilder import LogBuilder, model_image, random_builder

from harness.errors import InputError
from harness.record.logwrites import DISCARD, FLUSH, FUA, MARK, METADATA, open_log
from harness.replay.replayer import Replayer


def small(sectorsize: int = 512) -> LogBuilder:
    b = LogBuilder(sectorsize)
    b.write(0, b"A" * 4096).flush().mark("crashlab:mkfs")
    b.write(8, b"B" * 8192, FUA).discard(16, 8).write(24, b"C" * 4096, FLUSH | METADATA)
    return b


@pytest.mark.parametrize("sectorsize", [512, 4096])
def test_parse_small(tmp_path: Path, sectorsize: int) -> None:
    path = small(sectorsize).build(tmp_path / "log")
    with open_log(path) as log:
        assert log.sectorsize == sectorsize
        assert [e.flags for e in log.entries] == [0, FLUSH, MARK, FUA, DISCARD, FLUSH | METADATA]
        a, fl, mk, b, d, c = log.entries
        # Positions and lengths come out in 512-byte sectors whatever the log unit.
        assert (a.sector, a.nr_sectors, a.offset, a.length) == (0, 8, 0, 4096)
        assert (b.sector, b.nr_sectors) == (8, 16)
        assert (d.sector, d.nr_sectors, d.data_len, d.data_offset) == (16, 8, 0, 0)
        assert mk.mark == "crashlab:mkfs" and mk.data_len == 0 and not mk.is_write
        assert fl.is_flush and not fl.is_write
        assert bytes(log.data(a)) == b"A" * 4096
        assert bytes(log.data(b)) == b"B" * 8192
        assert bytes(log.data(c)) == b"C" * 4096
        assert a.data_offset == 2 * sectorsize  # super sector, then a's header sector
        assert b.is_fua and d.is_discard and c.is_flush and c.is_write
        s = log.stats()
        assert (s.entries, s.writes, s.flushes, s.fuas, s.marks, s.discards, s.metadata) == (
            6,
            3,
            2,
            1,
            1,
            1,
            1,
        )
        assert s.bytes_written == 16384 and s.bytes_discarded == 4096
        assert log.hash == hashlib.sha256(path.read_bytes()).hexdigest()
        assert log.find_mark("crashlab:mkfs") == 2
        assert log.extent() == 32 * 512


def test_data_after_close_is_refused(tmp_path: Path) -> None:
    log = open_log(small().build(tmp_path / "log"))
    log.close()
    with pytest.raises(ValueError):
        log.data(log.entries[0])


def resident(path: Path) -> int:
    """Bytes of ``path``'s mappings resident in this process (/proc/self/smaps)."""
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            ours = head[-1] == str(path)
        elif ours and head[0] == "Rss:":
            total += int(head[1]) * 1024
    return total


def test_a_hashed_or_replayed_log_is_not_kept_resident(tmp_path: Path) -> None:
    """A search holds every workload's log open: what hashing and replaying touched must
    not stay in its resident size (Log.release)."""
    b = LogBuilder(512)
    for i in range(64):
        b.write(i * 128, bytes([i]) * 65536, FUA)
    path = b.build(tmp_path / "log")
    with open_log(path) as log:
        view = log.data(log.entries[-1])
        assert bytes(view) == bytes([63]) * 65536 and resident(path) >= 65536
        view.release()
        assert log.hash == hashlib.sha256(path.read_bytes()).hexdigest()
        assert resident(path) < 65536  # the whole 4 MiB was read to hash it
        with Replayer(log, tmp_path / "img", 64 * 65536) as rp:
            rp.advance(len(log.entries))
            assert resident(path) >= 64 * 65536
        assert resident(path) < 65536
        assert bytes(log.data(log.entries[5])) == bytes([5]) * 65536  # mapped again


def test_extra_entries_beyond_nr_entries_are_ignored(tmp_path: Path) -> None:
    # The kernel only rewrites nr_entries after FUA and MARK entries.
    path = small().build(tmp_path / "log", nr_entries=3)
    with open_log(path) as log:
        assert len(log) == 3


def corrupt_cases(tmp_path: Path) -> list[tuple[bytes, str]]:
    raw = small().to_bytes()
    ss = 512
    # Entry layout for small(): e0 hdr@512 data 4096, e1 hdr@5120, e2 hdr@5632,
    # e3 hdr@6144 data 8192, e4 hdr@14848, e5 hdr@15360 data@15872..19968.
    bad_magic = b"\1" + raw[1:]
    bad_version = raw[:8] + struct.pack("<Q", 2) + raw[16:]
    bad_ss = raw[:24] + struct.pack("<I", 1000) + raw[28:]
    zero_hdr = raw[:5120] + bytes(32) + raw[5152:]
    bad_flags = raw[:5120] + struct.pack("<QQQQ", 0, 0, 1 << 9, 0) + raw[5152:]
    too_many = raw[:16] + struct.pack("<Q", 7) + raw[24:]
    return [
        (raw[:20], "too short for the super block"),
        (bad_magic, "byte offset 0: bad magic"),
        (bad_version, "byte offset 8: unsupported version 2"),
        (bad_ss, "sectorsize 1000"),
        (raw[: 6144 + 100], "entry 3 at byte offset 6144: header sector past end"),
        (raw[: 6144 + ss + 4096], "entry 3 at byte offset 6144: 8192 data bytes"),
        (raw[:-1], "entry 5 at byte offset 15360: 4096 data bytes"),
        (zero_hdr, "entry 1 at byte offset 5120: malformed header"),
        (bad_flags, "entry 1 at byte offset 5120: malformed header (flags 0x200)"),
        (too_many, "entry 6 at byte offset 19968: header sector past end"),
    ]


def test_corrupt_logs_raise_input_error(tmp_path: Path) -> None:
    for i, (data, message) in enumerate(corrupt_cases(tmp_path)):
        path = tmp_path / f"bad{i}"
        path.write_bytes(data)
        with pytest.raises(InputError) as exc:
            open_log(path)
        assert message in str(exc.value), (i, str(exc.value))
        assert str(path) in str(exc.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open log"):
        open_log(tmp_path / "nope")


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32), sectorsize=st.sampled_from([512, 1024, 4096]), cut=st.floats(0, 1)
)
def test_random_logs_roundtrip_and_truncation(
    tmp_path_factory: pytest.TempPathFactory, seed: int, sectorsize: int, cut: float
) -> None:
    rng = random.Random(seed)
    b = random_builder(rng, 60, 512, sectorsize)
    d = tmp_path_factory.mktemp("log")
    path = b.build(d / "log")
    with open_log(path) as log:
        assert len(log) == len(b.ops)
        img = bytearray(512 * 512)
        for e, op in zip(log.entries, b.ops, strict=True):
            assert (e.sector, e.nr_sectors, e.flags, e.mark) == (
                op.sector,
                op.nr_sectors,
                op.flags,
                op.mark,
            )
            assert bytes(log.data(e)) == op.data
            if e.is_discard:
                img[e.offset : e.offset + e.length] = bytes(e.length)
            elif e.is_write:
                img[e.offset : e.offset + e.length] = log.data(e)
        assert bytes(img) == model_image(b.ops, len(img), range(len(b.ops)))
    # Any truncation is reported as an InputError, never a traceback.
    raw = path.read_bytes()
    n = int(len(raw) * cut)
    if n < len(raw):
        path.write_bytes(raw[:n])
        with pytest.raises(InputError):
            open_log(path)


def test_entries_sequence_and_flag_index(tmp_path: Path) -> None:
    with open_log(small().build(tmp_path / "log")) as log:
        entries = log.entries
        assert entries[-1] is entries[5] and entries[-1].index == 5
        assert [e.index for e in entries[1:4]] == [1, 2, 3]
        assert [e.index for e in entries] == list(range(6))
        with pytest.raises(IndexError):
            entries[6]
        assert log.having(FLUSH) == [1, 5] and log.having(FUA | DISCARD) == [3, 4]
        assert dict(log.marks) == {2: "crashlab:mkfs"}
