"""The blktrace reader against blkparse's own counts of a real trace, and on records
built by hand for the matching of completions to their queued bios."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.proc import run
from harness.record import blktrace as bt

DATA = Path(__file__).parent / "data" / "blktrace"


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bt")
    for gz in DATA.glob("trace.blktrace.*.gz"):
        (d / gz.stem).write_bytes(gzip.decompress(gz.read_bytes()))
    return d


def test_counts_match_blkparse_on_a_real_trace(trace_dir: Path) -> None:
    s = bt.summarize(bt.read_events(bt.trace_files(trace_dir, "trace")))
    assert s.requests == {"flush": 525, "read": 5, "sync_write": 3210, "write": 14}
    assert s.bytes["sync_write"] == 31_546_368 and s.bytes["write"] == 48_128
    assert s.write_bytes == 31_594_496 and s.read_bytes == 6_144
    assert s.errors == 0 and 0 < s.seconds < 10
    # blkparse saw 2969 requests allocated from queued bios (G events); the rest of the
    # 3754 completions were made by the block layer itself (the flush machinery) and
    # have no queue event to be timed from
    assert s.to_dict()["q2c_ms"]["n"] == 2969
    # the application wrote 8 MiB: ext4 with a journal and fsync every 8 writes
    assert 3.0 < s.write_bytes / 8_388_608 < 4.5


@pytest.mark.skipif(shutil.which("blkparse") is None, reason="blkparse (blktrace) not installed")
def test_agrees_with_blkparse_per_rwbs(trace_dir: Path) -> None:
    out = run(
        ["blkparse", "-i", "trace", "-q", "-f", "%a %d %n\\n"], cwd=trace_dir
    ).stdout.splitlines()
    theirs: dict[str, int] = {}
    for line in out:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "C":
            k = (
                "flush"
                if parts[1] == "FN"
                else "read"
                if parts[1].startswith("R")
                else ("sync_write" if "S" in parts[1] else "write")
            )
            theirs[k] = theirs.get(k, 0) + 1
    ours = bt.summarize(bt.read_events(bt.trace_files(trace_dir, "trace"))).requests
    assert ours == theirs


def rec(t: int, sector: int, nbytes: int, event: int, cats: int, error: int = 0) -> bytes:
    magic = bt.MAGIC | bt.VERSION
    return struct.pack(
        "<IIQQIIIIIHH", magic, 0, t, sector, nbytes, event | cats << 16, 1, 0, 0, error, 0
    )


def test_merged_bios_count_once_timed_from_the_first(tmp_path: Path) -> None:
    w = bt.TC_WRITE | bt.TC_SYNC
    data = b"".join(
        [
            rec(1_000, 100, 4096, bt.TA_QUEUE, w),
            rec(2_000, 108, 4096, bt.TA_QUEUE, w),  # back-merged into the first
            rec(3_000, 100, 8192, bt.TA_ISSUE, w),
            rec(9_000, 100, 8192, bt.TA_COMPLETE, w),
            rec(10_000, 0, 0, bt.TA_QUEUE, bt.TC_FLUSH | bt.TC_READ),
            rec(12_000, 0, 0, bt.TA_COMPLETE, bt.TC_FLUSH | bt.TC_READ),
            rec(13_000, 7, 512, bt.TA_COMPLETE, bt.TC_WRITE | bt.TC_FUA, error=5),
        ]
    )
    (tmp_path / "t.blktrace.0").write_bytes(data)
    s = bt.summarize(bt.read_events([tmp_path / "t.blktrace.0"]))
    assert s.requests == {"sync_write": 1, "flush": 1, "fua_write": 1}
    assert s.q2c_ns == [8_000, 2_000] and s.d2c_ns == [6_000]
    assert s.errors == 1 and s.sizes == {8192: 1, 512: 1}


def test_not_a_trace_and_a_cut_record_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.blktrace.0"
    bad.write_bytes(b"\0" * 48)
    with pytest.raises(InputError, match="not a blktrace"):
        bt.read_events([bad])
    bad.write_bytes(rec(1, 0, 0, bt.TA_QUEUE, bt.TC_READ)[:30])
    with pytest.raises(InputError, match="cut short"):
        bt.read_events([bad])
    with pytest.raises(InputError, match=r"no t\.blktrace\.N"):
        bt.trace_files(tmp_path, "t")
