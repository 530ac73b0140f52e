"""Recovery modes (harness/model/recovery.py, issue 46): which a filesystem offers, the bad
input of one it does not, and how each mode's facts are judged (check/modecheck.py).
The facts here are the shapes checkstate.py returns (tests/test_recovery_modes_vm.py runs
them in guests)."""

from __future__ import annotations

import pytest

from harness.check import modecheck
from harness.config import scenario
from harness.errors import InputError
from harness.model import contract, recovery
from harness.outcome import Outcome

OK = contract.Command(argv=["mount"], rc=0, seconds=0.1, output="")
REFUSED = contract.Command(argv=["mount"], rc=32, seconds=0.1, output="cannot mount read-only")
HELD = contract.Verdict(mark="crashlab:sync:1", exact=True, known=True, checked=2, ok=True)
LOST = contract.Verdict(
    mark="crashlab:sync:1", exact=True, known=True, checked=2, missing=["a"], ok=False,
    profile="fsync-names", promise="fsync-names",
)  # fmt: skip


def test_each_filesystem_offers_its_own_no_replay_option() -> None:
    assert recovery.modes_of("ext4") == ("ro-device", "noload", "ro", "rw", "remount")
    assert "norecovery" in recovery.modes_of("xfs") and "nologreplay" in recovery.modes_of("btrfs")
    assert recovery.modes_of("jfs") == ("ro-device", "ro", "rw", "remount")
    # ext4 refuses data= without a journal: the no-replay mount drops it
    assert recovery.mount_options("noload", ["data=ordered", "noatime"]) == [
        "noatime", "ro", "noload",
    ]  # fmt: skip
    assert recovery.mount_options("ro", ["data=journal"]) == ["data=journal", "ro"]


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["check.recovery=['rw','nologreplay']"], "ext4 has no recovery mode 'nologreplay'"),
        (["check.recovery=['ro']"], "every check recovers by a read-write mount"),
        (["check.recovery=['rw','ro']", "check.guest=false"], "recovery modes are mounts"),
    ],
)
def test_a_mode_the_filesystem_lacks_is_bad_input(sets: list[str], words: str) -> None:
    with pytest.raises(InputError) as e:
        scenario.load("ext4-ordered-fsync", sets)
    assert words in e.value.message and "check.recovery" in e.value.message
    assert e.value.hint


def test_a_search_takes_modes_too() -> None:
    sc = scenario.load("ace-seq1-ci", ["fs.type=btrfs", "fs.disk_size=128M",
                                       "check.recovery=['rw','nologreplay']"])  # fmt: skip
    assert sc.check.recovery == ("rw", "nologreplay")
    with pytest.raises(InputError):
        scenario.load("ace-seq1-ci", ["check.recovery=['rw','norecovery']"])


def judge(mode: str, **kw: object) -> modecheck.CheckResult:
    return modecheck.judge_mode(contract.ModeFacts(mode=mode, **kw))  # type: ignore[arg-type]


def test_ro_is_held_to_what_was_made_durable() -> None:
    assert judge("ro", mount=OK, verify=HELD, umount=OK).outcome is Outcome.CONSISTENT
    lost = judge("ro", mount=OK, verify=LOST, umount=OK)
    assert lost.outcome is Outcome.DATA_LOSS and lost.rule == "file-missing"
    assert lost.checker == "mount[ro]+verify" and lost.promise == "fsync-names"
    assert judge("ro", mount=REFUSED).outcome is Outcome.MOUNT_FAILED  # must replay


def test_a_read_only_device_may_refuse_but_not_lose() -> None:
    refused = judge("ro-device", mount=REFUSED)
    assert refused.outcome is Outcome.CONSISTENT and "refused" in refused.note
    assert judge("ro-device", mount=OK, verify=LOST, umount=OK).outcome is Outcome.DATA_LOSS


def test_no_replay_is_measured_never_judged() -> None:
    shown = judge("noload", mount=OK, verify=LOST, umount=OK)
    assert shown.outcome is Outcome.CONSISTENT and "1 of 2 requirements held" in shown.note
    assert judge("norecovery", mount=REFUSED).outcome is Outcome.CONSISTENT
    hang = contract.Command(argv=["mount"], rc=-1, seconds=300, output="[timed out]")
    assert judge("nologreplay", mount=hang).outcome is Outcome.TIMEOUT  # still the lab's


def test_a_second_mount_must_change_nothing() -> None:
    same = judge("remount", mount=OK, verify=HELD, umount=OK, changed=[])
    assert same.outcome is Outcome.CONSISTENT
    moved = judge("remount", mount=OK, verify=HELD, umount=OK, changed=["a", "d/b"])
    assert moved.outcome is Outcome.DATA_LOSS and "changed_by_remount" in moved.note


def test_the_labs_own_failure_is_never_a_finding() -> None:
    broken = judge("ro", error="losetup: cannot find an unused loop device")
    assert broken.outcome is Outcome.HARNESS_ERROR
    stuck = judge("ro", mount=OK, verify=HELD, umount=REFUSED)
    assert stuck.outcome is Outcome.HARNESS_ERROR
