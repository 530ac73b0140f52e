"""ext4 fast commits (``mkfs -O fast_commit``, issue 47): the scenario, what the lab
refuses with them, and the known bug's steps. The real runs are in
tests/test_fastcommit_vm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import scenario
from harness.errors import InputError
from harness.model import opfile

KNOWN = Path(__file__).resolve().parent.parent / "campaigns" / "known-bugs"


def test_fast_commit_is_ext4_s_and_refuses_the_ordered_metadata_profile(tmp_path: Path) -> None:
    sc = scenario.load("ext4-fast-commit-fsync")
    assert sc.fs.fast_commit and sc.fs.mkfs_argv("/dev/x")[-3:] == ["-O", "fast_commit", "/dev/x"]
    assert not scenario.load("ext4-ordered-fsync").fs.fast_commit
    with pytest.raises(InputError) as e:
        scenario.load("xfs-fsync", ['fs.mkfs_options=["-O", "fast_commit"]'])
    assert "fs.mkfs_options" in e.value.message and "not of xfs" in e.value.message
    steps = tmp_path / "s.ops"
    steps.write_text("create a\nfsync a\n")
    overrides = ["workload.type=file", f"workload.path={steps}", "workload.ordered_metadata=true"]
    with pytest.raises(InputError) as e:
        scenario.load("ext4-fast-commit-fsync", overrides)
    assert "workload.ordered_metadata" in e.value.message and "fast commits" in e.value.message


def test_the_known_bug_steps_end_in_an_fsync_a_fast_commit_serves() -> None:
    ops = opfile.parse((KNOWN / "ext4-fc-replay-ro-mount.ops").read_text(), "ext4")
    assert [o["op"] for o in ops][-3:] == ["create", "write", "fsync"]
