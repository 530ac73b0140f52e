"""Blocks explained on XFS and btrfs (harness/triage/xfs.py, btrfs.py): the writes of
logs recorded from real runs (tests/data/logs/README.md), named with xfs_db and btrfs
inspect-internal on image files, as ``scenario explain`` and the triage report name them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import tools
from harness.record.logwrites import Log, open_log
from harness.replay import replayer as replay
from harness.triage import blocks, explain
from tests.conftest import real_log

Recorded = tuple[Log, dict[str, Any]]


def _recorded(name: str, tool: str, factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    if not tools.available(tool):
        pytest.skip(f"{tool} not installed ({tools.PACKAGES[tool]})")
    path, meta = real_log(name, factory)
    with open_log(path) as lg:
        assert lg.hash == meta["log_sha256"]  # the fixture README describes this log
        yield lg, meta


@pytest.fixture(scope="module")
def btrfs_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    yield from _recorded("btrfs-fsync-prefix", "btrfs", tmp_path_factory)


@pytest.fixture(scope="module")
def xfs_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    yield from _recorded("xfs-ops-small", "xfs_db", tmp_path_factory)


def _explain(rec: Recorded, fs: str, prefix: int, first: int, last: int) -> blocks.Explanation:
    """Entries ``first``..``last`` as the state applying every entry before ``prefix``
    sees them."""
    lg, meta = rec
    state = explain.whole(lg, prefix)
    indices = list(range(first, last + 1))
    return explain.explain_writes(lg, state, meta["device_size"], fs, indices)


def _whats(x: blocks.Explanation) -> dict[int, list[blocks.What]]:
    return {w.entry.index: [what for _, what in w.blocks] for w in x.writes}


def test_btrfs_fsync_writes_log_tree_leaves_then_a_superblock_pointing_at_them(
    btrfs_log: Recorded,
) -> None:
    # After mark sync:5 (entry 1293) an fsync writes two log-tree leaves, each twice
    # (metadata is DUP), then the superblock with the new log root (FUA).
    x = _explain(btrfs_log, "btrfs", 1300, 1294, 1299)
    whats = _whats(x)
    assert sorted(whats) == [1294, 1295, 1296, 1297, 1299]  # 1298: a bare flush
    leaves = [w for i in (1294, 1295, 1296, 1297) for w in whats[i]]
    assert {(w.kind, w.subject) for w in leaves} == {("tree block", "log tree")}
    assert all(w.detail.startswith("leaf, level 0, generation 7,") for w in leaves)
    assert (
        "  blocks 9544-9547: tree block of log tree: leaf, level 0, generation 7, 17 items, "
        "logical 30703616, copy 1 of 2" in x.lines()
    )
    # The second copy of the same tree block, at its DUP stripe.
    assert whats[1296][0].detail == whats[1294][0].detail.replace("copy 1", "copy 2")
    # The superblock's log root is the one-item leaf just written: the log root tree.
    (sb,) = whats[1299]
    assert blocks.describe(sb) == "superblock: primary, generation 6, log tree at 30720000"
    root = re.search(r"1 items, logical (\d+)", whats[1295][0].detail)
    assert root is not None and sb.detail.endswith(f"log tree at {root.group(1)}")


def test_btrfs_fsynced_data_is_owned_through_the_states_log_tree(btrfs_log: Recorded) -> None:
    # Block 3328 is written before the commit that would put it in the fs tree; only the
    # log tree of an fsync refers to it. The state after that fsync's log tree names it...
    after = _whats(_explain(btrfs_log, "btrfs", 1278, 1270, 1271))
    assert after[1270] == [blocks.What("file data", "/f2", 8192, source="in the log tree")]
    assert after[1271][0].offset == 114688
    # ... the state before it does not; the log's end does (by then /f2 is /f5, linked
    # as /f6 and /f7).
    (before,) = _whats(_explain(btrfs_log, "btrfs", 1271, 1270, 1270))[1270]
    assert blocks.describe(before) == (
        "file data of /f5 = /f6 = /f7 at byte 8192 [owner in the log tree, at the log's end]"
    )


def test_btrfs_mkfs_writes_chunk_and_root_tree_blocks_in_pieces(btrfs_log: Recorded) -> None:
    x = _explain(btrfs_log, "btrfs", len(btrfs_log[0].entries), 1124, 1142)
    lines = x.lines()
    chunk = "tree block of chunk tree: leaf, level 0, generation 5, 6 items, logical 22020096"
    root = "tree block of root tree: leaf, level 0, generation 4, 9 items, logical 30408704"
    for want in (
        f"  block 9472: {root}, copy 1 of 2",
        f"  block 9473: {root}, copy 1 of 2 (header in entry 1124)",
        f"  block 7424: {chunk}, copy 2 of 2",
        f"  block 7427: {chunk}, copy 2 of 2 (header in entry 1135)",
        f"  block 5376: {chunk}, copy 1 of 2",
    ):
        assert want in lines
    early = _explain(btrfs_log, "btrfs", len(btrfs_log[0].entries), 10, 10)
    assert early.lines()[1] == "  block 9: reserved: the device's first MiB, in no chunk"


XFS_LOG_START = 327728  # sector of the internal log (superblock logstart, AG 2 block 6)
XFS_ORACLE = Path(__file__).parent / "data" / "logs" / "xfs-ops-small.oracle.json"


def test_xfs_mkfs_writes_ag_headers_btree_roots_and_the_root_inode(xfs_log: Recorded) -> None:
    # The state right after mkfs is clean, so blockget answers for it.
    x = _explain(xfs_log, "xfs", 133, 0, 132)
    lines = x.lines()
    for want in (
        "  blocks 16-23: inode cluster of AG 0: zeros",  # mkfs zeroes the first 128 KiB
        "  blocks 40966-41221: log: zeros",
        "  block 0: AGFL of AG 0",
        "  block 0: AGF of AG 0",
        "  block 2: free-space btree by size of AG 0: level 0",
        "  block 0: AGI of AG 0",
        "  block 3: inode btree of AG 0: level 0",
        "  block 16: inode cluster of AG 0: inodes 128-135: <128> /, <129> realtime bitmap, "
        "<130> realtime summary",
        "  block 17: inode cluster of AG 0: inodes 136-143: none in use",
        "  block 20480: superblock of AG 1",
    ):
        assert want in lines


def test_xfs_fsyncs_write_log_records_at_their_lsn(xfs_log: Recorded) -> None:
    x = _explain(xfs_log, "xfs", 179, 133, 160)
    whats = _whats(x)
    assert "  blocks 40966-41478: log of cycle 0: empty records" in x.lines()  # mount
    fuas = [w.entry for w in x.writes if w.entry.is_fua]
    assert [e.index for e in fuas] == [136, 139, 142, 149, 155, 159]
    for e in fuas:
        first = whats[e.index][0]
        assert (first.kind, first.subject) == ("log", "cycle 1")
        # Each record's header names the log sector it was written at.
        assert first.detail.startswith(f"record at log sector {e.sector - XFS_LOG_START}, ")
    assert blocks.describe(whats[136][0]) == (
        "log of cycle 1: record at log sector 2, 2048 bytes of log items"
    )


def test_xfs_unmount_writes_back_inodes_and_ag_metadata_by_name(xfs_log: Recorded) -> None:
    x = _explain(xfs_log, "xfs", 179, 161, 167)
    lines = x.lines()
    for want in (
        "  block 16: inode cluster of AG 0: inodes 128-135: <128> /, <129> realtime bitmap, "
        "<130> realtime summary, <131> /f9, <132> /f8",
        "  block 0: AGF of AG 0",
        "  block 0: AGI of AG 0",
        "  block 1: free-space btree by block of AG 0: level 0",
        "  block 4: free-inode btree of AG 0: level 0",
    ):
        assert want in lines
    # The files named are those the workload wrote (its oracle's).
    wrote = {f"/{p}" for m in json.loads(XFS_ORACLE.read_text())["marks"] for p in m["files"]}
    assert {"/f8", "/f9"} <= wrote


def test_xfs_data_of_a_dirty_state_is_owned_at_the_logs_end(
    xfs_log: Recorded, tmp_path: Path
) -> None:
    # After the FUA at 155 the log is dirty: blockget refuses the state, and the clean
    # unmounted image at the log's end names the file and offset.
    x = _explain(xfs_log, "xfs", 156, 150, 155)
    assert "  blocks 14-15: file data of /f8 at byte 24576 [owner at the log's end]" in x.lines()
    # Asked of the dirty state alone, the explanation says why no owner is known.
    lg, meta = xfs_log
    state = replay.materialize(lg, explain.whole(lg, 156), tmp_path / "s.img", meta["device_size"])
    alone = blocks.explain(
        "xfs", state, [lg.entries[152]], [(state, "")], lambda e: bytes(lg.data(e))
    )
    (what,) = {w for _, w in alone.writes[0].blocks}
    assert what.kind == "unknown" and "blockget refused" in what.detail


def test_a_device_without_a_filesystem_is_a_harness_error(tmp_path: Path) -> None:
    from harness.errors import HarnessError
    from harness.triage import btrfs, xfs

    if not (tools.available("btrfs") and tools.available("xfs_db")):
        pytest.skip("btrfs-progs or xfsprogs not installed")
    empty = tmp_path / "zero.img"
    empty.write_bytes(bytes(1 << 20))
    for read in (btrfs.sector_size, xfs.geometry):
        with pytest.raises(HarnessError, match=str(empty)):
            read(empty)
