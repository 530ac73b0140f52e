"""The guest's op generator, run on the host with --mark-cmd none."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.guest import opgen
from harness.model import oracle
from harness.model.ops import SYNC_OPS, Op
from tests import guestcopy

OPGEN = Path(opgen.__file__)


def run(root: Path, oracle: Path, seed: int = 1, ops: int = 200, *extra: str) -> int:
    root.mkdir(parents=True, exist_ok=True)
    return opgen.main(
        [
            "run",
            "--root",
            str(root),
            "--seed",
            str(seed),
            "--ops",
            str(ops),
            "--mark-cmd",
            "none",
            "--oracle",
            str(oracle),
            *extra,
        ]
    )


def verify(root: Path, oracle: Path, mark: str, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    assert opgen.main(["verify", "--root", str(root), "--oracle", str(oracle), "--mark", mark]) == 0
    return json.loads(capsys.readouterr().out)


def on_disk(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            out[p.relative_to(root).as_posix()] = oracle.file_digest(str(p))[0]
    return out


def marks(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mark"]: m for m in body["marks"]}


def test_final_mark_matches_the_real_files(tmp_path: Path) -> None:
    assert run(tmp_path / "root", tmp_path / "o.json", seed=3, ops=300) == 0
    o = json.loads((tmp_path / "o.json").read_text())
    assert o["complete"] and o["error"] is None
    final = marks(o)[o["final_mark"]]
    assert final["mark"] == f"crashlab:sync:{len(o['marks'])}"
    assert {p: f["sha256"] for p, f in final["files"].items()} == on_disk(tmp_path / "root")
    assert len(o["ops"]) == 301 and o["ops"][-1] == {
        "i": 300,
        "op": "sync",
        "final": True,
        "mark": o["final_mark"],
    }


def test_marks_are_numbered_after_each_sync_op(tmp_path: Path) -> None:
    run(tmp_path / "r", tmp_path / "o.json", seed=5, ops=150)
    o = json.loads((tmp_path / "o.json").read_text())
    synced = [op for op in o["ops"] if op["op"] in SYNC_OPS]
    assert [op["mark"] for op in synced] == [
        f"crashlab:sync:{n}" for n in range(1, len(synced) + 1)
    ]
    assert [m["after_op"] for m in o["marks"]] == [op["i"] for op in synced]


def test_same_seed_same_oracle_other_seed_differs(tmp_path: Path) -> None:
    run(tmp_path / "a", tmp_path / "a.json", seed=11)
    run(tmp_path / "b", tmp_path / "b.json", seed=11)
    run(tmp_path / "c", tmp_path / "c.json", seed=12)
    a, b, c = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "abc")
    # The times rule 20 reads off the filesystem are the run's, not the seed's.
    assert {*_times(a)} >= {"clock", "until", "times"}
    assert _untimed(a) == _untimed(b)
    assert a["ops"] != c["ops"]


def _times(doc: Any) -> Iterator[str]:
    """The keys of rule 20's observations anywhere in an oracle document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in ("clock", "until", "times", "dir_times"):
                yield k
            yield from _times(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _times(v)


def _untimed(doc: Any) -> Any:
    if isinstance(doc, dict):
        skip = ("clock", "until", "times", "dir_times")
        return {k: _untimed(v) for k, v in doc.items() if k not in skip}
    return [_untimed(v) for v in doc] if isinstance(doc, list) else doc


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), ops=st.integers(0, 120), files=st.integers(1, 8))
def test_any_seed_final_oracle_matches(
    tmp_path_factory: pytest.TempPathFactory, seed: int, ops: int, files: int
) -> None:
    d = tmp_path_factory.mktemp("h")
    assert run(d / "r", d / "o.json", seed, ops, "--files", str(files), "--max-size", "20000") == 0
    o = json.loads((d / "o.json").read_text())
    final = marks(o)[o["final_mark"]]
    assert {p: f["sha256"] for p, f in final["files"].items()} == on_disk(d / "r")
    assert len(on_disk(d / "r")) <= files


def test_verify_detects_deleted_and_modified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, oracle = tmp_path / "r", tmp_path / "o.json"
    run(root, oracle, seed=2, ops=200)
    o = json.loads(oracle.read_text())
    final = o["final_mark"]
    assert verify(root, oracle, final, capsys)["ok"] is True
    nonempty = sorted(p for p, f in marks(o)[final]["files"].items() if f["size"] > 0)
    gone, changed = nonempty[0], nonempty[1]
    (root / gone).unlink()
    with open(root / changed, "r+b") as f:
        b = f.read(1)
        f.seek(0)
        f.write(bytes([b[0] ^ 1]))
    v = verify(root, oracle, final, capsys)
    assert v["ok"] is False
    assert v["missing"] == [gone]
    # The unlink, after the run, gave its directory an mtime later than any the run saw
    # (rule 20): the directory is named with a slash, the root as "/".
    where = os.path.dirname(gone) + "/"
    assert [m["path"] for m in v["mismatched"]] == [where, changed]
    assert v["mismatched"][0]["stamp"]["which"] == "mtime"  # the first checked
    assert v["mismatched"][1]["expected"] == marks(o)[final]["files"][changed]["sha256"]
    want = marks(o)[final]
    assert v["checked"] == len(want["files"]) + len(want["dirs"]) + len(want["absent"])


def test_unknown_or_no_mark_requires_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, oracle = tmp_path / "r", tmp_path / "o.json"
    run(root, oracle, ops=50)
    for m in ("", "crashlab:sync:99999", "bogus"):
        v = verify(root, oracle, m, capsys)
        assert v["ok"] is True and v["checked"] == 0 and v["known"] is False


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        opgen.main(["verify", "--root", str(tmp_path), "--oracle", str(tmp_path / "no.json")]) == 2
    )
    (tmp_path / "bad.json").write_text("{not json")
    assert (
        opgen.main(["verify", "--root", str(tmp_path), "--oracle", str(tmp_path / "bad.json")]) == 2
    )
    assert (
        opgen.main(
            [
                "run",
                "--root",
                str(tmp_path),
                "--seed",
                "1",
                "--ops",
                "1",
                "--oracle",
                str(tmp_path / "o.json"),
            ]
        )
        == 2
    )  # dmsetup without --dm-name
    assert "--dm-name" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        opgen.main(["run", "--root", str(tmp_path)])
    assert e.value.code == 2


def test_runs_as_a_standalone_script(tmp_path: Path) -> None:
    """The guest has no harness package: the file must work on its own."""
    (tmp_path / "r").mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            str(guestcopy.unpack(tmp_path / "g") / "opgen.py"),
            "run",
            "--root",
            str(tmp_path / "r"),
            "--seed",
            "4",
            "--ops",
            "30",
            "--mark-cmd",
            "none",
            "--oracle",
            str(tmp_path / "o.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["complete"] is True


def test_mark_goes_through_dmsetup_without_udev(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def fake_popen(argv: list[str], **kw: Any) -> subprocess.Popen[bytes]:
        calls.append((argv, kw["env"]))
        return real_popen(["true"], **kw)

    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    body = opgen.execute(
        str(tmp_path), [Op("create", "a"), Op("fsync", "a")], mark_cmd="dmsetup", dm_name="logw"
    )
    assert [c[0] for c in calls] == [
        ["dmsetup", "message", "logw", "0", "mark", "crashlab:sync:1"],
        ["dmsetup", "message", "logw", "0", "mark", "crashlab:sync:2"],
    ]
    assert all(env["DM_DISABLE_UDEV"] == "1" for _, env in calls)
    assert body["final_mark"] == "crashlab:sync:2"


# Soundness on hand-made sequences: what is required at each mark.


def required(tmp_path: Path, ops: list[Op]) -> dict[str, set[str]]:
    body = opgen.execute(str(tmp_path), ops)
    assert body["complete"], body["error"]
    return {m["mark"]: set(m["files"]) | {d + "/" for d in m["dirs"]} for m in body["marks"]}


def m(n: int) -> str:
    return f"crashlab:sync:{n}"


def test_write_without_fsync_is_not_required(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [
            Op("create", "a"),
            Op("write", "a", data=b"x" * 10),
            Op("fsync", "a"),
            Op("write", "a", offset=10, data=b"y"),
            Op("fsync_dir", ""),
        ],
    )
    assert r[m(1)] == set()  # written again before mark 2
    assert r[m(2)] == set()  # data not durable at mark 2
    assert r[m(3)] == {"a"}  # the final sync


def test_fsynced_file_is_required_until_touched(tmp_path: Path) -> None:
    body = opgen.execute(
        str(tmp_path),
        [
            Op("create", "a"),
            Op("write", "a", data=b"hello"),
            Op("fsync", "a"),
            Op("create", "b"),
            Op("fsync_dir", ""),
            Op("truncate", "a", size=2),
            Op("sync"),
        ],
    )
    files = {mk["mark"]: mk["files"] for mk in body["marks"]}
    # a's fsync committed its whole inode: its times are required from mark 1 (rule 20)
    a = files[m(1)]["a"]
    assert set(a.pop("times")) == {"mtime", "ctime"}
    assert files[m(1)] == {"a": {"size": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}}
    # a is truncated before mark 3; b, created and its directory synced, exists empty
    # (oracle rule 10); no fsync or sync has committed b's inode, so no time of it is
    assert files[m(2)] == {"b": {"size": 0, "sha256": hashlib.sha256(b"").hexdigest()}}
    assert body["marks"][1]["dir_times"].keys() == {""}  # the root's fsync committed it
    assert files[m(3)]["a"]["size"] == 2 and set(files[m(3)]) == {"a", "b"}


def test_fdatasync_does_not_make_a_new_name_durable(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [Op("create", "a"), Op("write", "a", data=b"1"), Op("fdatasync", "a"), Op("fsync_dir", "")],
    )
    assert r[m(1)] == set()
    assert r[m(2)] == {"a"}  # the directory fsync made the name durable


def test_file_in_unsynced_new_directory_waits_for_the_directory(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [
            Op("mkdir", "d"),
            Op("mkdir", "d/e"),
            Op("create", "d/e/f"),
            Op("write", "d/e/f", data=b"z"),
            Op("fsync", "d/e/f"),
            Op("fsync_dir", "d"),
            Op("fsync_dir", ""),
        ],
    )
    assert r[m(1)] == set()  # d and d/e are not durable
    assert r[m(2)] == set()  # d/e's name is, d's is not
    assert r[m(3)] == {"d/", "d/e/", "d/e/f"}


def test_dir_fsync_does_not_make_its_own_name_durable(tmp_path: Path) -> None:
    r = required(tmp_path, [Op("mkdir", "d"), Op("fsync_dir", "d"), Op("sync")])
    assert r[m(1)] == set()
    assert r[m(2)] == {"d/"}


def test_file_renamed_after_a_mark_is_not_required_there(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [
            Op("create", "a"),
            Op("write", "a", data=b"q"),
            Op("fsync", "a"),
            Op("rename", "a", dst="b"),
            Op("fsync_dir", ""),
        ],
    )
    assert r[m(1)] == set()
    assert r[m(2)] == {"b"}


def test_rename_over_touches_the_destination(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [
            Op("create", "a"),
            Op("create", "b"),
            Op("write", "b", data=b"old"),
            Op("sync"),
            Op("write", "a", data=b"new"),
            Op("fsync", "a"),
            Op("rename", "a", dst="b"),
            Op("fsync", "b"),
        ],
    )
    assert r[m(1)] == {"b"}  # a is written before mark 2
    assert r[m(2)] == set()  # both a and b change before mark 3
    assert r[m(3)] == {"b"}  # fsync of b made its new name durable


def test_write_through_one_link_touches_the_other(tmp_path: Path) -> None:
    r = required(
        tmp_path,
        [
            Op("create", "a"),
            Op("link", "a", dst="b"),
            Op("sync"),
            Op("append", "b", data=b"+"),
            Op("fsync_dir", ""),
        ],
    )
    assert r[m(1)] == set()
    assert r[m(2)] == set()
    assert r[m(3)] == {"a", "b"}


def test_unlinked_file_is_not_required(tmp_path: Path) -> None:
    r = required(tmp_path, [Op("create", "a"), Op("sync"), Op("unlink", "a"), Op("sync")])
    assert r[m(1)] == set() and r[m(2)] == set()


def test_failed_op_stops_the_run_and_keeps_settled_marks(tmp_path: Path) -> None:
    body = opgen.execute(str(tmp_path), [Op("create", "a"), Op("sync"), Op("create", "a")])
    assert body["complete"] is False and "op 2 create 'a'" in body["error"]
    assert body["final_mark"] is None
    assert [mk["files"] for mk in body["marks"]] == [{}]  # a was touched by the failed op


def test_a_setxattr_the_filesystem_refuses_is_recorded_failed(tmp_path: Path) -> None:
    """setxattr's own answer (E2BIG here: past the VFS's 64 KiB; ENOSPC on ext4's small
    blocks) fails the op, not the recording: the attribute is absent at the next mark."""
    big = Op("setxattr", "a", name="user.big", data=b"x" * 70000)
    body = opgen.execute(str(tmp_path), [Op("create", "a"), big, Op("sync")])
    assert body["complete"] is True, body.get("error")
    (entry,) = [e for e in body["ops"] if e["op"] == "setxattr"]
    assert entry["failed"] == "E2BIG"
    assert "user.big" not in json.dumps(body["marks"][-1]["files"]["a"])


def test_rename_onto_another_link_of_the_same_file_is_a_no_op(tmp_path: Path) -> None:
    body = opgen.execute(
        str(tmp_path), [Op("create", "a"), Op("link", "a", dst="b"), Op("rename", "a", dst="b")]
    )
    assert body["complete"] and set(body["marks"][-1]["files"]) == {"a", "b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_posix_names_need_a_directory_fsync(tmp_path: Path) -> None:
    """With fsync_names=False (ext2, POSIX), fsync(file) makes the data durable but not
    the name; the directory's fsync then makes it required."""
    ops = [
        Op("create", "a"),
        Op("write", "a", data=b"x" * 10),
        Op("fsync", "a"),
        Op("fsync_dir", ""),
    ]
    root = tmp_path / "posix"
    root.mkdir()
    strict = opgen.execute(str(root), ops, fsync_names=False)
    got = {mk["mark"]: set(mk["files"]) for mk in strict["marks"]}
    assert got[m(1)] == set()  # fsync(a): data durable, name not
    assert got[m(2)] == {"a"}  # fsync of the root directory
    linux = required(tmp_path, ops)
    assert linux[m(1)] == {"a"}  # ext4/xfs/btrfs: fsync persists the name too


def test_flush_after_sync_fsyncs_the_device_after_each_sync_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triage experiment (docs/findings/ext2-nojournal-fsync-6.1.md): the device is
    flushed after every sync call, before its mark; the oracle stays the same."""
    flushed: list[tuple[str, int]] = []
    monkeypatch.setattr(opgen, "flush_device", lambda dm: flushed.append((dm, len(flushed))))
    ops = [Op("create", "a"), Op("fsync", "a"), Op("write", "a", data=b"x"), Op("fsync_dir")]
    (tmp_path / "p").mkdir()
    plain = opgen.execute(str(tmp_path / "p"), ops)
    body = opgen.execute(str(tmp_path), ops, dm_name="crashlab-lw", flush_after_sync=True)
    assert [dm for dm, _ in flushed] == ["crashlab-lw"] * 3  # two calls and the final sync
    assert _untimed(body["marks"]) == _untimed(plain["marks"])
    status = run(tmp_path / "r", tmp_path / "o.json", 1, 5, "--flush-after-sync")
    assert status == opgen.EXIT_USAGE  # no --dm-name: nothing to flush
