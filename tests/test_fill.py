"""A full disk (``fs.fill``, issue 47): an op the full disk fails is recorded as failed
and the workload goes on; the oracle holds that it changed nothing durable -- a failed
namespace op nothing at all, a failed write only the bytes the file really holds after
it, none of them durable until a later persistence op. ENOSPC is made here by a
stand-in for the write call (the host's own filesystem is never filled); the real fill
runs in a guest (tests/test_fill_vm.py)."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.guest import fill, opgen
from harness.model.ops import Op

FULL = frozenset({errno.ENOSPC})


def failing(monkeypatch: pytest.MonkeyPatch, kinds: dict[str, int]) -> None:
    """Each op of a kind in ``kinds`` fails with ENOSPC; a write first writes that many
    bytes (a short write), as a filesystem that ran out of blocks midway does."""
    real = opgen.perform

    def perform(root: str, op: Op, *args: Any) -> None:
        if op.kind not in kinds:
            return real(root, op, *args)
        if op.kind == "write":
            with open(os.path.join(root, op.path), "r+b") as f:
                f.seek(op.offset)
                f.write(op.data[: kinds[op.kind]])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(opgen, "perform", perform)


def test_a_short_write_is_held_to_the_bytes_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing(monkeypatch, {"write": 4096})
    ops = [Op("create", "a"), Op("write", "a", data=b"x" * 8192), Op("sync")]
    body = opgen.execute(str(tmp_path), ops, tolerate=FULL)
    assert body["complete"], body["error"]
    assert body["ops"][1]["failed"] == "ENOSPC"
    req = body["marks"][0]["files"]["a"]
    assert req["size"] == 4096 and req["sha256"] == hashlib.sha256(b"x" * 4096).hexdigest()


def test_a_failed_create_or_fsync_promises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing(monkeypatch, {"create": 0, "fsync": 0})
    ops = [Op("create", "a"), Op("mkdir", "d"), Op("fsync_dir", "d"), Op("sync")]
    body = opgen.execute(str(tmp_path), ops, tolerate=FULL)
    assert [e.get("failed") for e in body["ops"]] == ["ENOSPC", None, None, None, None]
    assert len(body["marks"]) == 3  # the directory's fsync, the sync, the final sync
    assert "a" not in body["marks"][-1]["files"] and "d" in body["marks"][-1]["dirs"]


def test_an_op_on_a_name_the_full_disk_never_made_is_not_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workload file names its files itself: its write after a create the full disk
    # refused would fail with ENOENT (found by the f2fs FGGC steps, 2026-12-07).
    real, calls = opgen.perform, []

    def perform(root: str, op: Op, *args: Any) -> None:
        calls.append(op.kind)
        if op.kind == "create" and calls.count("create") == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(root, op, *args)

    monkeypatch.setattr(opgen, "perform", perform)
    ops = [Op("create", "a"), Op("write", "a", data=b"x" * 10), Op("fsync", "a"),
           Op("create", "a"), Op("write", "a", data=b"y" * 10), Op("fsync", "a")]  # fmt: skip
    body = opgen.execute(str(tmp_path), ops, tolerate=FULL)
    assert body["complete"], body["error"]
    assert [e.get("failed") for e in body["ops"][:6]] == ["ENOSPC", "ENOENT", "ENOENT"] + [None] * 3
    assert calls[:4] == ["create", "create", "write", "fsync"]  # the two never called
    assert body["marks"][0]["files"]["a"]["sha256"] == hashlib.sha256(b"y" * 10).hexdigest()


def test_a_failed_fsync_places_no_mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing(monkeypatch, {"fsync": 0})
    body = opgen.execute(str(tmp_path), [Op("create", "b"), Op("fsync", "b")], tolerate=FULL)
    assert body["ops"][1]["failed"] == "ENOSPC" and "mark" not in body["ops"][1]
    assert [e["op"] for e in body["ops"] if "mark" in e] == ["sync"]  # the final one only


def test_without_a_fill_enospc_still_stops_the_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing(monkeypatch, {"create": 0})
    body = opgen.execute(str(tmp_path), [Op("create", "a"), Op("sync")])
    assert not body["complete"] and body["errno"] == errno.ENOSPC


def test_fill_is_a_fraction_below_one() -> None:
    assert scenario.load("ext4-ordered-fsync", ["fs.fill=0.97"]).fs.fill == 0.97
    with pytest.raises(InputError) as e:
        scenario.load("ext4-ordered-fsync", ["fs.fill=1.5"])
    assert "fs.fill" in e.value.message and "1.5" in e.value.message
    assert fill.main(["--root", "/nonexistent", "--fraction", "1.5"]) == 2  # before any write
