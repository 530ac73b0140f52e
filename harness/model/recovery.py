"""How a crash state is recovered: the modes a check can mount it in, per filesystem, and
what each promises (stdlib only: the host validates a scenario's modes, the guest's
checkstate.py runs them).

- ``rw``: a read-write mount, the filesystem's own replay; then its checker. Every check
  has it; the other modes come before it, each on a copy-on-write overlay of the state
  (a device-mapper snapshot in the guest), so each sees the state as the crash left it.
- ``ro``: a read-only mount of a writable device. ext4, xfs and btrfs replay their
  journal or log all the same (ext4's ``ext4_fill_super``, xfs's ``xfs_log_mount`` --
  "recovery required on read-only device" only when the *device* is read-only -- and
  btrfs's ``open_ctree``), so it must show what was made durable, as ``rw`` must.
- ``ro-device``: the device itself read-only (``blockdev --setro``). The filesystem must
  replay in memory or refuse; a refusal is the honest answer, a mount that shows less
  than was made durable is a finding.
- ``noload`` (ext3/ext4), ``norecovery`` (xfs), ``nologreplay`` (btrfs): replay skipped,
  read-only. These promise no durability (fsync'd changes may live only in the journal
  or log), so they are measured, never judged: whether it mounts, and how much of what
  was made durable it shows.
- ``remount``: after ``rw``'s recovery and umount, mount again: replay is done, so the
  second mount must change nothing and still show what was made durable.
"""

from __future__ import annotations

RW, RO, RO_DEVICE, REMOUNT = "rw", "ro", "ro-device", "remount"
# Each filesystem's option that mounts without replaying its journal or log.
NO_REPLAY = {"ext3": "noload", "ext4": "noload", "xfs": "norecovery", "btrfs": "nologreplay"}


def modes_of(fs: str) -> tuple[str, ...]:
    """The recovery modes ``fs`` offers, in the order a check runs them."""
    skip = (NO_REPLAY[fs],) if fs in NO_REPLAY else ()
    return (RO_DEVICE, *skip, RO, RW, REMOUNT)


def judged(mode: str) -> bool:
    """Whether a mode promises what the oracle requires (the no-replay ones do not)."""
    return mode not in NO_REPLAY.values()


def mount_options(mode: str, base: list[str]) -> list[str]:
    """The scenario's mount options ``base`` as ``mode`` mounts with them. Without
    replay there is no journal, and ext4 refuses a ``data=`` mode then ("can't mount with
    data=, fs mounted w/o journal"): the journaling mode is dropped with it."""
    if mode in (RO, RO_DEVICE):
        return [*base, "ro"]
    if not judged(mode):
        return [*(o for o in base if not o.startswith("data=")), "ro", mode]
    return base


def on_overlay(mode: str) -> bool:
    """Modes that run before ``rw``, each on its own copy-on-write view of the state."""
    return mode not in (RW, REMOUNT)
