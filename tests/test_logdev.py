"""A journal or log on a device of its own (``fs.devices = 2``, issue 47): the keys that
allow it and refuse it, how mkfs, mount and the checkers are told of the device, the
workload's mark in both logs at one moment, and the log device's cut paired with each
state. The real recording, replay and checks run in guests (tests/test_logdev_vm.py)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from logbuilder import MKFS_MARK, LogBuilder

from harness.config import scenario
from harness.crashstate.checking import SecondLog
from harness.errors import HarnessError, InputError
from harness.guest import opgen
from harness.record.logwrites import open_log
from harness.replay import crashstates


def refused(name: str, *sets: str) -> str:
    with pytest.raises(InputError) as e:
        scenario.load(name, list(sets))
    return e.value.message + " " + (e.value.hint or "")


def test_a_second_device_is_refused_where_the_filesystem_has_none() -> None:
    said = refused("f2fs-fsync", "fs.devices=2", "crash.states=[{kind='mark'}]")
    assert "fs.devices" in said and "f2fs" in said and "ext4, xfs, btrfs" in said
    said = refused("ext4-nojournal-fsync", "fs.devices=2", "crash.states=[{kind='mark'}]")
    assert "without a journal" in said
    assert "fs.devices" in refused("ext4-ordered-fsync", "fs.devices=3")


def test_a_second_device_takes_states_at_marks_judged_in_a_guest() -> None:
    said = refused("ext4-ordered-fsync", "fs.devices=2")  # its states: fua and mark
    assert "crash.states" in said and "fua" in said
    said = refused("ext4-logdev-fsync", "check.guest=false")
    assert "check.guest" in said
    assert "fs.devices" in refused("ext4-logdev-fsync", "recovery_crash.sample=2")
    assert "fs.devices" in refused("ace-seq1-ci", "fs.devices=2")  # a search: one log each


def test_mkfs_mount_and_checkers_name_the_log_device() -> None:
    ext4 = scenario.load("ext4-logdev-fsync", []).fs
    assert ext4.second_device is not None and ext4.second_device.mkfs[:1] == ("mkfs.ext4",)
    assert ext4.mkfs_argv("/dev/a", "/dev/j")[-3:] == ["-J", "device=/dev/j", "/dev/a"]
    assert "journal_path=/dev/j" in ext4.mount_argv("/dev/a", "/mnt", dev2="/dev/j")[4]
    assert ext4.second_flags("/x/j.img") == ["-j", "/x/j.img"]
    xfs = scenario.load("xfs-logdev-fsync", []).fs
    assert xfs.second_device is not None and xfs.second_device.mkfs == ()
    assert "logdev=/dev/l,size=64m" in xfs.mkfs_argv("/dev/a", "/dev/l")
    assert xfs.all_mount_options("/dev/l")[-1] == "logdev=/dev/l"
    assert xfs.second_flags("/dev/l") == ["-l", "/dev/l"]
    btrfs = scenario.load("btrfs-raid1-fsync", []).fs
    assert btrfs.second_size == btrfs.disk_size and btrfs.second_flags("/dev/m") == []
    want = ["-d", "raid1", "-m", "raid1", "/dev/a", "/dev/m"]  # the mirror after the first
    assert btrfs.mkfs_argv("/dev/a", "/dev/m")[-6:] == want
    assert "device=/dev/m" in btrfs.all_mount_options("/dev/m")
    one = scenario.load("ext4-ordered-fsync", []).fs
    assert one.second_device is None and one.mkfs_argv("/dev/a", "/dev/j")[-1] == "/dev/a"


def test_a_mark_reaches_both_logs_while_both_devices_are_suspended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[str]] = []

    class Done:
        rc, stdout, stderr = 0, "", ""

    def run(argv: list[str], *args: Any, **kw: Any) -> Done:
        calls.append(argv[1:])
        return Done()

    monkeypatch.setattr(opgen.runner, "run", run)
    opgen.emit_mark("dmsetup", "fs,log", "crashlab:sync:1")
    assert calls == [
        ["suspend", "--nolockfs", "fs"], ["suspend", "--nolockfs", "log"],
        ["message", "fs", "0", "mark", "crashlab:sync:1"],
        ["message", "log", "0", "mark", "crashlab:sync:1"],
        ["resume", "fs"], ["resume", "log"],
    ]  # fmt: skip
    calls.clear()
    opgen.emit_mark("dmsetup", "fs", "crashlab:sync:2")
    assert calls == [["message", "fs", "0", "mark", "crashlab:sync:2"]]


def test_each_state_pairs_with_the_log_device_cut_at_its_mark(tmp_path: Path) -> None:
    fs = LogBuilder().mark(MKFS_MARK).write(8, b"a" * 512).flush().mark("crashlab:sync:1")
    journal = LogBuilder().write(0, b"j" * 512).flush().mark(MKFS_MARK)
    journal.write(1, b"1" * 512).flush().mark("crashlab:sync:1").write(2, b"2" * 512).flush()
    with ExitStack() as stack:
        lg = stack.enter_context(open_log(fs.build(tmp_path / "fs")))
        jl = stack.enter_context(open_log(journal.build(tmp_path / "j")))
        ld = SecondLog(jl, 4096)
        states = crashstates.at_marks(lg)
        paired = {s.mark: ld.state(s).prefix for s in states}
        assert paired == {MKFS_MARK: 3, "crashlab:sync:1": 6}
        image = ld.image(states[-1], tmp_path / "ld.img")
        data = image.read_bytes()
        assert data[512:1024] == b"1" * 512 and data[1024:1536] == bytes(512)
        between = crashstates.at_flushes(lg)[0]  # cut at a flush, not at a mark
        with pytest.raises(HarnessError):
            ld.state(between)
