"""Promises a configuration gives up: the options that waive what the oracle and the
checkers hold a filesystem to, each with its source.

A finding on a run whose configuration waived the promise is no report on the kernel:
the account counts it ``expected`` with the option named (``Waiver.name``, stored in
``expected_items.waiver``), a positive control that expects findings is answered by it
(ext4's ``barrier=0`` control expects the loss, as a check of the lab), and triage writes
no maintainer's mail for it. The oracle still judges the state and stores what it found:
a waiver changes how it counts, never what was seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.outcome import FINDINGS, Outcome


@dataclass(frozen=True)
class Waiver:
    name: str  # how results, the account and triage name it
    fs: frozenset[str]
    options: frozenset[str]  # mount options that give it (any one)
    waives: str  # the promise, in words
    source: str

    def why(self) -> str:
        return f"{self.name} waives {self.waives} ({self.source})"


_EXT = frozenset({"ext3", "ext4"})
# The volatile-cache model (every crash state the lab cuts: writes no flush covered may
# be lost) is exactly the disk these options say the system does not have.
TABLE: tuple[Waiver, ...] = (
    Waiver("barrier=0", _EXT, frozenset({"barrier=0", "nobarrier"}),
           "ordered journal commits on a volatile write cache, so every crash promise",
           "ext4(5) / Documentation/admin-guide/ext4.rst, barrier: barriers make "
           "volatile disk write caches safe to use; disabling them is safe only on "
           "battery-backed disks"),
    Waiver("nobarrier", frozenset({"btrfs"}), frozenset({"nobarrier"}),
           "flushes of the write cache at commit, so every crash promise",
           "btrfs(5), barrier/nobarrier: if disabled on a device with a volatile "
           "(non-battery-backed) write-back cache, it will lead to filesystem corruption "
           "on a system crash or power loss"),
    Waiver("nobarrier", frozenset({"f2fs"}), frozenset({"nobarrier", "fsync_mode=nobarrier"}),
           "cache flushes (nobarrier) or the flush at fsync (fsync_mode=nobarrier)",
           "Documentation/filesystems/f2fs.rst: nobarrier, the device's cache is "
           "not flushed; fsync_mode=nobarrier, fsync issues no flush (a non-atomic "
           "cache assumed safe)"),
    Waiver("nobarrier", frozenset({"reiserfs"}), frozenset({"barrier=none"}),
           "cache flushes at journal commit, so every crash promise",
           "mount(8), reiserfs: barrier=none disables the barriers at journal commit"),
)  # fmt: skip


def configured(fs_type: str, mount_options: Iterable[str]) -> list[Waiver]:
    """The waivers a filesystem mounted with ``mount_options`` takes on."""
    opts = {o.strip() for opt in mount_options for o in opt.split(",")}
    return [w for w in TABLE if fs_type in w.fs and w.options & opts]


def waiver_of(fs_type: str, mount_options: Sequence[str], o: Outcome) -> Waiver | None:
    """The waiver that makes outcome ``o`` no finding: a waived promise makes every
    finding of a crash state possible (a hang, a panic stay the lab's: never waived)."""
    if o not in FINDINGS:
        return None
    return next(iter(configured(fs_type, mount_options)), None)
