"""The op table (issue 45): each op written once, and everything that reads ops derives
from it -- the workload-file parser, the oracle's op list, the guest's calls, the shell
spellings of a report's script and of an fstests test -- and the op added through it
(``clone``, FICLONE) with its oracle rule (19)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from harness.fstests import gen
from harness.model import opfile, oracle, shell
from harness.model.ops import (
    ENDS,
    PERSIST_OPS,
    SHUTDOWN_FLAGS,
    SPECS,
    SYNC_OPS,
    SYNCED_WRITES,
    TABLE,
    WRITE_OPS,
    Op,
)

REPO = Path(__file__).resolve().parent.parent
SAMPLE = {
    "path": "a", "dst": "b", "target": "t", "offset": 4096, "length": 4096, "size": 8192,
    "mode": "punch_hole", "name": "user.x", "fd": "h", "perm": 0o700, "uid": 1, "gid": 2,
}  # fmt: skip


def test_every_op_is_written_once_and_its_sets_are_read_off_the_table() -> None:
    assert len(SPECS) == len(TABLE)
    # What the lab's rules were written against, now derived: a change here is a change
    # of the oracle's behaviour and must be one on purpose.
    assert {"fsync", "fdatasync", "fsync_dir", "sync", "syncfs", "fsync_fd", "fdatasync_fd",
            *SHUTDOWN_FLAGS} == SYNC_OPS  # fmt: skip
    assert set(SHUTDOWN_FLAGS) == ENDS  # a shutdown ends the workload: nothing runs after it
    assert SYNCED_WRITES == {"osync_write": "fsync", "odsync_write": "fdatasync",
                             "dwrite_dsync": "fdatasync"}  # fmt: skip
    assert SYNC_OPS | set(SYNCED_WRITES) == PERSIST_OPS
    assert {"write", "append", "overwrite", "dwrite", "mwrite", *SYNCED_WRITES} == WRITE_OPS
    for spec in TABLE:
        assert set(spec.args) <= {*SAMPLE}, spec.name
        assert spec.shell or spec.no_shell, f"{spec.name}: a spelling, or why there is none"


@pytest.mark.parametrize("spec", TABLE, ids=lambda s: s.name)
def test_an_ops_oracle_entry_reads_back_as_the_op(spec: Any) -> None:
    op = Op(spec.name, **{k: v for k, v in SAMPLE.items() if k != "length"}, data=b"\xcd" * 4096)
    entry = op.describe()
    assert entry["op"] == spec.name
    back = Op.from_entry(entry, 0xCD)
    assert back.describe() == entry  # the shape every store holds, read back whole
    for key in set(spec.args) & set(entry):
        got = len(back.data) if key == "length" else getattr(back, key)
        want = len(op.data) if key == "length" else getattr(op, key)
        assert got == want, (spec.name, key)


def test_every_op_has_its_call_in_the_guest() -> None:
    """syscalls.perform compares the op's kind with each name: every table op is there."""
    tree = ast.parse((REPO / "harness/guest/syscalls.py").read_text())
    named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    # The shutdowns by their flags' table: one ioctl, FS_IOC_SHUTDOWN, three flags.
    words = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert "SHUTDOWN_FLAGS" in words
    assert {s.name for s in TABLE} - named - set(SHUTDOWN_FLAGS) == set()


def test_one_translation_speaks_both_dialects() -> None:
    op = Op("rename_noreplace", "d/a", dst="d/b")
    assert shell.spell(op, shell.SCRIPT) == 'src/renameat2 -n "$M"/d/a "$M"/d/b'
    assert gen.spell(op) == "$here/src/renameat2 -n $SCRATCH_MNT/d/a $SCRATCH_MNT/d/b"
    assert shell.spell(Op("clone", "a", dst="b"), shell.SCRIPT) == (
        'xfs_io -f -c "reflink "$M"/a" "$M"/b'
    )


def test_a_workload_file_takes_clone_where_the_filesystem_can(tmp_path: Path) -> None:
    text = "write foo 0 64K\nfsync foo\nclone foo bar\nfsync bar\n"
    ops = opfile.parse(text, "btrfs")
    assert [o["op"] for o in ops] == ["create", "write", "fsync", "clone", "fsync"]
    with pytest.raises(opfile.OpFileError) as e:
        opfile.parse(text, "ext4")
    assert "ext4 cannot do clone" in str(e.value) and "fs.type=btrfs" in e.value.hint
    with pytest.raises(opfile.OpFileError, match="'foo' exists already"):
        opfile.parse("create foo\nclone foo foo\n", "xfs")
    with pytest.raises(opfile.OpFileError, match="'nope' does not exist"):
        opfile.parse("create foo\nclone nope bar\n", "xfs")


def _marks(text: str) -> dict[str, Any]:
    """The oracle of a workload file's ops, drawn through the model alone (FICLONE cannot
    run on the host's filesystem: the guest test runs it for real)."""
    track = oracle.Tracker(True)
    for i, op in enumerate(opfile.to_ops(opfile.parse(text, "btrfs"))):
        track.before(op)
        track.after(op)
        if op.kind in PERSIST_OPS:
            track.mark(track.next_mark(), i)
    return {"format": oracle.FORMAT, "marks": track.marks(), "final_mark": None}


def test_rule_19_a_clone_is_durable_like_written_data_and_leaves_its_source() -> None:
    o = _marks("write foo 0 64K\nfsync foo\nclone foo bar\nfsync_dir .\nfsync bar\n")
    foo = oracle.requirements(o, "crashlab:sync:1", exact=True)
    assert foo is not None and set(foo["files"]) == {"foo"}
    # The directory's fsync makes the name durable, not the bytes (rule 1).
    named = oracle.requirements(o, "crashlab:sync:2", exact=True)
    assert named is not None and set(named["files"]) == {"foo"}
    # The source was required all along: the clone does not touch it (not exempted by
    # mark 1's interval, which holds the clone).
    during = oracle.requirements(o, "crashlab:sync:1", exact=False)
    assert during is not None and "foo" in during["files"]
    whole = oracle.requirements(o, "crashlab:sync:3", exact=True)
    assert whole is not None
    assert whole["files"]["bar"]["sha256"] == whole["files"]["foo"]["sha256"]
    assert whole["files"]["bar"]["size"] == 64 << 10


def test_every_rule_is_numbered_in_the_oracle_and_in_docs_verdicts() -> None:
    """A rule is a row of an oracle/rules/ module, a paragraph of the oracle's docstring and a
    numbered item of docs/verdicts.md: the three say the same numbers."""
    import re

    from harness.model.oracle import rules

    docs = (REPO / "docs" / "verdicts.md").read_text()
    numbered = {int(n) for n in re.findall(r"^(\d+)\. \*\*", docs, flags=re.M)}
    in_oracle = {int(n) for n in re.findall(r"^(\d+)\. ", oracle.__doc__ or "", flags=re.M)}
    assert {r.number for r in rules.TABLE if r.number} <= numbered
    assert numbered - {12} == in_oracle  # rule 12 is fio's (fioverify), not the oracle's
    assert all(r.source for r in rules.TABLE)
