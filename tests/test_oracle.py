"""The oracle's teeth (issue 9): each rule of harness/model/oracle/ on hand-made op
sequences run against real files, then checked against trees that a crash could and
could not leave. Tests marked "before" failed on the old oracle (it required nothing
there, or did not look)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from harness.guest import opgen
from harness.model import oracle
from harness.model.ops import Op
from tests.handmade import untimed


def m(n: int) -> str:
    return f"crashlab:sync:{n}"


def run(root: Path, ops: list[Op], **kw: Any) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    body = opgen.execute(str(root), ops, **kw)
    assert body["complete"], body["error"]
    return untimed({"format": oracle.FORMAT, **body})


def snapshot(root: Path, into: Path) -> Path:
    shutil.copytree(root, into, symlinks=True)
    return into


def check(root: Path, o: dict[str, Any], mark: str, exact: bool = False) -> dict[str, Any]:
    return oracle.verify(str(root), o, mark, exact)


def test_after_umount_everything_must_be_there(tmp_path: Path) -> None:
    # Before: crashlab:umount and dm-log-writes-end had no oracle entry: an empty
    # directory passed exactly where everything must have survived.
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("write", "a", data=b"abc"), Op("create", "b")])
    empty = tmp_path / "empty"
    empty.mkdir()
    for mark in oracle.AFTER_FINAL:
        assert check(root, o, mark).ok
        v = check(empty, o, mark)
        assert not v.ok and sorted(v.missing) == ["a", "b"]


def test_a_state_cut_exactly_at_a_mark_keeps_what_the_interval_changed(tmp_path: Path) -> None:
    # Before: a file fsync'd at mark 1 and rewritten after it was not required at mark 1
    # at all, even in a state with nothing after the mark.
    root = tmp_path / "r"
    ops = [Op("create", "a"), Op("write", "a", data=b"one"), Op("fsync", "a")]
    at_mark = None
    root.mkdir()
    body = opgen.execute(str(root), ops)  # state as it is at mark 1
    at_mark = snapshot(root, tmp_path / "at1")
    shutil.rmtree(root)
    o = run(root, [*ops, Op("overwrite", "a", data=b"TWO"), Op("unlink", "a")])
    assert body["marks"][0]["mark"] == m(1)
    assert "a" not in o["marks"][0]["files"]  # anywhere before mark 2: not required
    assert check(at_mark, o, m(1), exact=True).ok
    gone = tmp_path / "gone"
    gone.mkdir()
    v = check(gone, o, m(1), exact=True)
    assert not v.ok and v.missing == ["a"]


def test_an_appended_file_keeps_its_durable_prefix(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(
        root,
        [
            Op("create", "log"),
            Op("write", "log", data=b"first"),
            Op("fsync", "log"),
            Op("append", "log", offset=5, data=b"-second"),
        ],
    )
    first = o["marks"][0]
    assert first["prefixes"] == {"log": {"sha256": oracle_sha(b"first"), "size": 5}}
    crashed = tmp_path / "c"
    crashed.mkdir()
    (crashed / "log").write_bytes(b"first-sec")  # a torn append: fine
    assert check(crashed, o, m(1)).ok
    (crashed / "log").write_bytes(b"fir")  # the durable prefix cut short
    assert not check(crashed, o, m(1)).ok
    (crashed / "log").write_bytes(b"FIRST-second")
    assert not check(crashed, o, m(1)).ok


def test_an_append_inside_a_grown_file_is_an_overwrite(tmp_path: Path) -> None:
    # Before: ACE's append writes at the base size; after a truncate that grew the file
    # it overwrote zeros that mark 2 had made durable, and rule 4 still required them in
    # a state cut after mark 2 with that write landed (a false data_loss on btrfs
    # 6.1.0-56, seq-2 workload 19403: truncate-grow fdatasync; append fdatasync).
    root = tmp_path / "r"
    base = b"b" * 16
    o = run(
        root,
        [
            Op("create", "foo"),
            Op("write", "foo", data=base),
            Op("sync"),
            Op("truncate", "foo", size=64),
            Op("fdatasync", "foo"),
            Op("append", "foo", offset=16, data=b"later"),
            Op("fdatasync", "foo"),
        ],
    )
    second = o["marks"][1]
    assert second["mark"] == m(2) and "foo" not in second["prefixes"]
    crashed = tmp_path / "c"
    crashed.mkdir()
    landed, grown = base + b"later" + bytes(64 - 21), base + bytes(48)
    for content in (landed, grown):
        (crashed / "foo").write_bytes(content)
        assert check(crashed, o, m(2)).ok
    # cut exactly at mark 2 (rule 3): the grown file as it was, the later write absent
    assert check(crashed, o, m(2), exact=True).ok
    (crashed / "foo").write_bytes(landed)
    assert not check(crashed, o, m(2), exact=True).ok
    (crashed / "foo").write_bytes(base)  # the grown size lost: fdatasync broke
    assert not check(crashed, o, m(2), exact=True).ok


def oracle_sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_rename_over_gives_old_or_new_never_neither(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(
        root,
        [
            Op("create", "f"),
            Op("write", "f", data=b"old"),
            Op("create", "f.tmp"),
            Op("write", "f.tmp", data=b"new"),
            Op("sync"),
            Op("rename", "f.tmp", dst="f"),
        ],
    )
    either = o["marks"][0]["either"]
    assert set(either["f"]) == {oracle_sha(b"old"), oracle_sha(b"new")}
    c = tmp_path / "c"
    c.mkdir()
    for content, ok in ((b"old", True), (b"new", True), (b"", False), (b"nld", False)):
        (c / "f").write_bytes(content)
        assert check(c, o, m(1)).ok is ok, content
    (c / "f").unlink()
    assert check(c, o, m(1)).missing == ["f"]


def test_a_durably_removed_name_stays_gone(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(
        root,
        [
            Op("create", "a"),
            Op("create", "b"),
            Op("sync"),
            Op("unlink", "a"),
            Op("fsync_dir", ""),
            Op("rename", "b", dst="c"),
        ],
    )
    assert o["marks"][0]["absent"] == []  # the unlink was not durable yet at mark 1
    assert o["marks"][1]["absent"] == ["a"]  # after the directory fsync it is
    c = snapshot(root, tmp_path / "c")
    (c / "a").write_bytes(b"")
    v = check(c, o, m(2))
    assert not v.ok and v.present == ["a"]


def test_sizes_and_link_counts_are_checked(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(
        root,
        [
            Op("create", "a"),
            Op("write", "a", data=b"12345"),
            Op("link", "a", dst="b"),
            Op("sync"),
        ],
    )
    want = o["marks"][0]["files"]
    assert want["a"]["nlink"] == 2 and want["a"]["size"] == 5
    c = snapshot(root, tmp_path / "c")
    os.unlink(c / "b")
    (c / "b").write_bytes(b"12345")  # same content, but no longer the same inode
    v = check(c, o, m(1))
    assert not v.ok and {n.path for n in v.nlink} == {"a", "b"}


def test_before_a_sync_the_link_count_is_not_required(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, [Op("create", "a"), Op("sync"), Op("link", "a", dst="b"), Op("fsync", "a")])
    assert "nlink" not in o["marks"][1]["files"]["a"]  # the link itself is not durable
