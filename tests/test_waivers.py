"""Promises a configuration waives (harness/waivers.py, issue 46): which options give up
what, and that a loss under one is counted expected and never mailed to a maintainer
(tests/test_account.py holds the account and the barrier=0 control)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness import waivers
from harness.cli import triage as cli_triage
from harness.config.crash import FsSpec
from harness.outcome import Outcome


@pytest.mark.parametrize(
    ("fs", "options", "name"),
    [
        ("ext4", ["barrier=0"], "barrier=0"),
        ("ext4", ["noatime,nobarrier"], "barrier=0"),  # one mount -o string
        ("ext3", ["nobarrier"], "barrier=0"),
        ("btrfs", ["nobarrier"], "nobarrier"),
        ("f2fs", ["fsync_mode=nobarrier"], "nobarrier"),
        ("ext4", ["barrier=1"], None),
        ("ext4", [], None),
        ("xfs", ["nobarrier"], None),  # refused by xfs since 4.19: the mount fails, loudly
        ("btrfs", ["barrier=0"], None),  # not btrfs's spelling
    ],
)
def test_which_options_waive(fs: str, options: list[str], name: str | None) -> None:
    found = waivers.configured(fs, options)
    assert [w.name for w in found] == ([name] if name else [])
    if name:
        assert waivers.waiver_of(fs, options, Outcome.MOUNT_FAILED) is found[0]


def test_only_findings_are_waived() -> None:
    # A hang or a panic is the lab's whatever the configuration, and clean is clean.
    for o in (Outcome.TIMEOUT, Outcome.PANIC, Outcome.HARNESS_ERROR, Outcome.CONSISTENT):
        assert waivers.waiver_of("ext4", ["barrier=0"], o) is None


def test_every_waiver_says_what_and_where() -> None:
    for w in waivers.TABLE:
        assert w.fs and w.options and w.waives and w.source
        assert w.name in w.why() and w.source in w.why()


def test_no_mail_for_a_waived_promise() -> None:
    fs = FsSpec(type="ext4", mount_options=("barrier=0",))
    said = cli_triage._waived(SimpleNamespace(fs=fs))  # type: ignore[arg-type]
    assert said.startswith("no report written: barrier=0 waives")
