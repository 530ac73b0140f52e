"""Workload files (issue 37): the format, its errors, the new ops run against real files,
and the oracle's rules 13-17 -- each checked against trees a crash could and could not
leave."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.guest import opgen
from harness.model import contract, generate, opfile, oracle
from harness.model.ops import Op
from tests.handmade import untimed

REPO = Path(__file__).resolve().parent.parent
KNOWN = REPO / "campaigns" / "known-bugs"


def run(root: Path, text: str, fs: str = "ext4", **kw: Any) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    body = opgen.execute(str(root), opfile.to_ops(opfile.parse(text, fs)), **kw)
    assert body["complete"], body["error"]
    return untimed({"format": oracle.FORMAT, **body})


def at(o: dict[str, Any], n: int) -> dict[str, Any]:
    """Mark n's requirements, as a state cut exactly there is judged."""
    req = oracle.requirements(o, f"crashlab:sync:{n}", exact=True)
    assert req is not None
    return req


def test_a_bug_reports_steps_parse_into_the_lab_ops() -> None:
    ops = opfile.parse((KNOWN / "btrfs-zero-size-after-link.ops").read_text(), "btrfs")
    assert [o["op"] for o in ops] == [
        "mkdir", "create", "write", "sync", "truncate", "fsync", "link", "fsync_dir",
    ]  # fmt: skip
    # A write to a new name created it (xfs_io -f); a directory's fsync is fsync_dir.
    assert ops[1]["line"] == ops[2]["line"]
    assert ops[2]["length"] == 64 << 10
    assert opfile.persistence_points(ops) == 3


def test_the_zero_size_bug_is_a_requirement_at_the_directory_fsync(tmp_path: Path) -> None:
    o = run(tmp_path / "r", (KNOWN / "btrfs-zero-size-after-link.ops").read_text(), "btrfs")
    req = at(o, 3)  # after `fsync d`: foo was truncated to 0 and fsync'd, bar linked to it
    assert req["files"]["d/foo"]["size"] == 0
    assert req["files"]["d/bar"]["size"] == 0
    # What 5254d4181add's log replay left: foo with its old 64K.
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "r", crashed)
    with open(crashed / "d" / "foo", "wb") as f:
        f.write(os.urandom(64 << 10))
    got = oracle.verify(str(crashed), o, "crashlab:sync:3", exact=True)
    assert not got.ok
    assert {m.path for m in got.mismatched} >= {"d/foo"}


@pytest.mark.parametrize(
    ("text", "line", "said", "hint"),
    [
        ("mkdir d\ntrunc d 0", 2, "trunc: unknown op", "did you mean 'truncate'?"),
        ("overwrite nope 0 1", 1, "'nope' does not exist", ""),
        ("write foo 0 4K\nfsync fo", 2, "'fo' does not exist", "did you mean 'foo'?"),
        ("mkdir d\nsubvol_create d/s", 2, "ext4 cannot do subvol_create", "fs.type=btrfs"),
        ("fsync_fd h", 1, "descriptor 'h' is not open", "open h PATH"),
        ("write a 0", 1, "takes 3 arguments, got 2", "write PATH OFFSET LENGTH"),
        ("write a 0 4Q", 1, "length '4Q' is not a size", "64K"),
        ("symlink a l\nfsync l", 2, "symbolic link", ""),
        ("dwrite a 100 4K", 1, "block-aligned", "4096"),
        ("write /etc/passwd 0 1", 1, "leaves the filesystem", ""),
        ("mkdir d\nwrite d/f 0 1\nrmdir d", 3, "not empty", ""),
        ("# only a comment\n", 0, "no ops", ""),
    ],
)
def test_bad_lines_are_named_with_a_hint(text: str, line: int, said: str, hint: str) -> None:
    with pytest.raises(opfile.OpFileError) as e:
        opfile.parse(text, "ext4")
    assert e.value.line == line
    assert said in str(e.value)
    assert hint in e.value.hint


def test_a_bad_workload_file_exits_2_before_anything_runs(tmp_path: Path) -> None:
    bad = tmp_path / "steps.ops"
    bad.write_text("mkdir d\nwrite d/foo 0 64K\nsync\ntrunc d/foo 0\n")
    db = tmp_path / "lab.sqlite"
    r = subprocess.run(
        [sys.executable, "-m", "harness", "run", "btrfs-fsync", "--workload-file", str(bad),
         "--db", str(db)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert f"{bad}: line 4: trunc: unknown op" in r.stderr
    assert "did you mean 'truncate'?" in r.stderr
    assert "Traceback" not in r.stderr
    assert not db.exists()  # nothing recorded


EVERY_OP = """\
mkdir d1
mkdir d1/d2
mkdir d3
write d1/f 0 8K
append d1/f 100
chmod d1 0700
fsync d1
rename d1/d2 d3/d2
open h d1
unlink d1/f
rmdir d1
fsync_fd h
close h
write a 0 4K
open g a
unlink a
write_fd g 0 10
fsync_fd g
tmpfile t d3
write_fd t 0 5000
fsync_fd t
linkat t d3/tmp
fsync d3
symlink ../a d3/sym
fsync d3
chmod d3/tmp 0600
chown d3/tmp 1000 1000
utimes d3/tmp
fsync d3/tmp
write x 0 4K
write y 0 8K
exchange x y
rename_noreplace x z
fsync .
falloc y default 8K 64K
dwrite_dsync y 0 4K
truncate y 0
fdatasync y
"""


def test_every_new_op_runs_and_its_final_state_is_judged(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, EVERY_OP)
    final = oracle.verify(str(root), o, o["final_mark"], exact=True)
    assert final.ok, final
    want = oracle.requirements(o, o["final_mark"], exact=True)
    assert want is not None
    assert want["files"]["d3/sym"]["symlink"] == "../a"
    assert want["files"]["d3/tmp"]["mode"] == 0o600
    assert want["files"]["d3/tmp"]["size"] == 5000
    assert want["files"]["z"]["size"] == 8192  # x and y exchanged, then x renamed to z
    assert want["files"]["y"]["size"] == 0
    assert {"a", "d1", "x"} <= set(want["absent"])


def test_a_symlink_is_judged_by_its_target_not_what_it_points_at(tmp_path: Path) -> None:
    root = tmp_path / "r"
    o = run(root, "write a 0 4K\nsymlink a l\nfsync .\n")
    assert oracle.verify(str(root), o, "crashlab:sync:1", exact=True).ok
    os.unlink(root / "l")
    os.symlink("b", root / "l")
    got = oracle.verify(str(root), o, "crashlab:sync:1", exact=True)
    assert got.mismatched == [contract.Mismatch(path="l", symlink="b", expected="a")]
    os.unlink(root / "l")
    shutil.copy(root / "a", root / "l")  # a file where the link was: not the link
    assert oracle.verify(str(root), o, "crashlab:sync:1", exact=True).missing == ["l"]


def test_chmod_is_required_after_fsync_not_after_fdatasync(tmp_path: Path) -> None:
    o = run(tmp_path / "r", "write a 0 4K\nsync\nchmod a 0600\nfdatasync a\nfsync a\n")
    assert "mode" not in at(o, 2)["files"]["a"]  # fdatasync: not needed to read the data
    assert at(o, 3)["files"]["a"]["mode"] == 0o600
    root = tmp_path / "r"
    os.chmod(root / "a", 0o644)
    got = oracle.verify(str(root), o, "crashlab:sync:3", exact=True)
    meta = got.mismatched[0].metadata
    assert meta is not None and meta.mode == 0o644


def test_an_fsynced_unlinked_file_stays_gone_where_fsync_commits_the_inode(
    tmp_path: Path,
) -> None:
    steps = "write a 0 4K\nsync\nopen h a\nunlink a\nwrite_fd h 0 100\nfsync_fd h\n"
    journaled = run(tmp_path / "j", steps)
    assert "a" in at(journaled, 2)["absent"]
    posix = run(tmp_path / "p", steps, fsync_names=False)  # ext2: no promise about names
    assert "a" not in at(posix, 2)["absent"]


def test_a_removed_directorys_fsync_commits_its_removal(tmp_path: Path) -> None:
    # btrfs 999757231c49's steps: the fsync of a directory removed while held.
    steps = "mkdir d1\nmkdir d1/d2\nmkdir d3\nsync\nchmod d1 0700\nfsync d1\n"
    steps += "rename d1/d2 d3/d2\nopen fd d1\nrmdir d1\nfsync_fd fd\n"
    o = run(tmp_path / "r", steps)
    assert "d1" in at(o, 3)["absent"]  # committed removed, as a file's unlink (rule 15)
    assert "d1" not in at(run(tmp_path / "p", steps, fsync_names=False), 3)["absent"]
    # A held directory that still exists: its fsync is that directory's fsync.
    held = run(
        tmp_path / "s", "mkdir d\nsync\nopen h d\nwrite d/f 0 1\nfdatasync d/f\nfsync_fd h\n"
    )
    assert "d/f" not in at(held, 2)["files"]  # fdatasync: the data, not the name
    assert "d/f" in at(held, 3)["files"]


def test_a_snapshots_files_are_required_only_after_sync(tmp_path: Path) -> None:
    model = oracle.Model()
    for op in opfile.to_ops(opfile.parse("subvol_create s\nwrite s/f 0 4K\nsync\n", "btrfs")):
        model.apply(op)
    model.apply(Op("snapshot", "s", dst="snap"))
    model.apply(Op("fsync_dir", ""))
    assert "snap" in model.durable_dirs()
    assert "snap/f" not in model.durable_files()
    model.apply(Op("sync"))
    assert model.durable_files()["snap/f"]["sha256"] == model.durable_files()["s/f"]["sha256"]


def test_a_failure_says_which_promise_it_broke(tmp_path: Path) -> None:
    """Profiles: the journaled filesystems' fsync makes the name it went through
    durable; POSIX does not. A lost name of that kind broke the stronger promise alone,
    lost fsync'd data under a synced name broke POSIX."""
    o = run(
        tmp_path / "r",
        "mkdir d\nsync\nwrite d/a 0 4K\nfsync d/a\nwrite d/b 0 4K\nfsync d\nfsync d/b\n",
    )
    assert o["profile"] == "fsync-names"
    state = tmp_path / "s"
    shutil.copytree(tmp_path / "r", state)
    os.unlink(state / "d" / "a")  # durable only through fsync(d/a): the stronger promise
    got = oracle.verify(str(state), o, "crashlab:sync:2", exact=True)
    assert (got.missing, got.promise) == (["d/a"], "fsync-names")
    with open(state / "d" / "b", "r+b") as f:  # named by fsync(d), data by fsync(d/b)
        f.write(b"torn")
    got = oracle.verify(str(state), o, "crashlab:sync:4", exact=True)
    assert got.promise == "posix"
    assert oracle.verify(str(tmp_path / "r"), o, "crashlab:sync:4", exact=True).promise is None
    assert run(tmp_path / "p", "write a 0 1\nfsync a\n", fsync_names=False)["profile"] == "posix"


def test_ordered_metadata_keeps_what_came_before_the_fsyncd_change(tmp_path: Path) -> None:
    """Rule 18 (generic/785's steps): the root's fsync keeps the new directory's entry
    under the ordered-metadata profile; fsync-names requires only the root's entries."""
    steps = "create file1\nsync\nwrite file1 0 1000\nfsync file1\nmkdir dir\n"
    steps += "create dir/foo\nrename file1 file2\nfsync .\n"
    plain = run(tmp_path / "a", steps)
    assert "dir/foo" not in at(plain, 3)["files"] and "dir" in at(plain, 3)["dirs"]
    o = run(tmp_path / "b", steps, ordered=True)
    assert o["profile"] == "ordered-metadata"
    assert "dir/foo" in at(o, 3)["files"] and "file1" in at(o, 3)["absent"]
    state = tmp_path / "s"
    shutil.copytree(tmp_path / "b", state)
    os.unlink(state / "dir" / "foo")  # what 5630f7557de6's kernels left
    got = oracle.verify(str(state), o, "crashlab:sync:3", exact=True)
    assert (got.missing, got.promise) == (["dir/foo"], "ordered-metadata")
    # A file untouched since a sync: its fsync commits nothing, so nothing after it.
    late = run(tmp_path / "c", "create a\nsync\ncreate b\nfsync a\n", ordered=True)
    assert "b" not in at(late, 2)["files"]


def test_the_op_generator_draws_the_bug_ops_behind_their_switch(tmp_path: Path) -> None:
    plain = generate.Generator(7, 8, 20000, extended=True)
    model = oracle.Model()
    drawn = [plain.next(model) for _ in range(1)]  # the extended mix as it always was
    gen = generate.Generator(7, 8, 20000, extended=True, bug_ops=True)
    body = opgen.execute(str(tmp_path), generator=gen, count=400)
    assert body["complete"], body["error"]
    kinds = {op["op"] for op in body["ops"]}
    assert {"symlink", "chmod", "exchange", "open", "fsync_fd", "write_fd"} <= kinds
    assert any(op["op"] == "truncate" and op["size"] == 0 for op in body["ops"])
    o = {"format": oracle.FORMAT, **body}
    assert oracle.verify(str(tmp_path), o, o["final_mark"], exact=True).ok
    assert generate.Generator(7, 8, 20000, extended=True).next(oracle.Model()) == drawn[0]


def test_f2fs_gc_is_an_f2fs_op_that_keeps_every_byte() -> None:
    # The FGGC known bug's trigger (campaigns/known-bugs/f2fs-fggc-node-marks.ops).
    ops = opfile.parse("create a\nwrite a 0 4K\nsync\nf2fs_gc\nfsync a\n", "f2fs")
    assert ops[3] == {"op": "f2fs_gc", "line": 4}
    with pytest.raises(opfile.OpFileError) as e:
        opfile.parse("f2fs_gc\n", "ext4")
    assert "f2fs" in str(e.value) and "fs.type=f2fs" in (e.value.hint or str(e.value))
