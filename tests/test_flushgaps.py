"""harness/report/flushgaps.py: which sync calls returned with no flush before their mark,
and when a block's writes reached the log (the ext2 no-journal triage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.record.logwrites import open_log
from harness.report import flushgaps
from tests.logbuilder import LogBuilder

OPS = [
    {"i": 0, "op": "create", "path": "f1"},
    {"i": 1, "op": "fsync", "path": "f1", "mark": "crashlab:sync:1"},
    {"i": 2, "op": "fsync_dir", "path": "", "mark": "crashlab:sync:2"},
    {"i": 3, "op": "sync", "mark": "crashlab:sync:3"},
]


def _log(tmp_path: Path) -> Path:
    b = LogBuilder()
    b.mark("crashlab:mkfs")
    b.write(8, b"a" * 1024).flush().mark("crashlab:sync:1")  # fsync that flushed
    b.mark("crashlab:sync:2")  # a directory fsync that returned with nothing flushed ...
    b.write(2, b"d" * 1024).flush().mark("crashlab:sync:3")  # ... its block held until here
    return b.build(tmp_path / "log")


def test_marks_without_a_flush_are_named(tmp_path: Path) -> None:
    with open_log(_log(tmp_path)) as log:
        gaps = flushgaps.mark_gaps(log, OPS)
    assert [(g.mark, g.op["op"], g.flushed) for g in gaps] == [
        ("crashlab:sync:1", "fsync", True),
        ("crashlab:sync:2", "fsync_dir", False),
        ("crashlab:sync:3", "sync", True),
    ]
    assert (gaps[0].writes, gaps[0].flushes, gaps[1].writes) == (1, 1, 0)


def test_a_blocks_writes_say_which_mark_they_follow(tmp_path: Path) -> None:
    with open_log(_log(tmp_path)) as log:
        # block 1 of 1 KiB = sectors 2-3: written after mark 2, so not durable at it.
        assert flushgaps.block_writes(log, 1, 1024) == [
            {"entry": 5, "fua": False, "flush": False, "after_mark": "crashlab:sync:2"}
        ]
        assert flushgaps.block_writes(log, 7, 1024) == []


def test_cli_counts_the_calls_without_a_flush(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle = tmp_path / "oracle.json"
    oracle.write_text(json.dumps({"ops": OPS}))
    assert flushgaps.main([str(_log(tmp_path)), str(oracle), "--block", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 fsync/fdatasync/dir-fsync calls returned with no flush" in out
    assert "(1 of 1 directory fsyncs)" in out
    assert 'block 1: {"entry": 5' in out
