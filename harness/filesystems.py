"""The filesystems the lab makes, checks and mounts: one record each, so that adding one
(JFS, ReiserFS and F2FS joined seed 002's ext2/ext3/XFS here) is one entry, not a branch
in every module that makes, checks or mounts a filesystem.

Host checks of ext* keep their own path (``harness/check/host.py``: journal replay on
the state, put back after it, ``extjournal``); every other filesystem is checked on a
sparse copy of the state (replay, read-only check, repair), so a checker that replays its
log before it checks -- fsck.jfs, reiserfsck -- never writes to the state itself.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class SecondDevice:
    """The second device of a filesystem made on two (``fs.devices = 2``): its journal or
    log, or a mirror; how it is made, named to the filesystem's mkfs and mount, and to
    the host checker. ``{dev}`` stands for its path (a guest device, or the host's image
    file)."""

    role: str  # "journal", "log" or "mirror" (mkfs takes a mirror after the first device)
    size: int  # 0: the filesystem device's size
    mkfs: tuple[str, ...]  # makes the device (argv before it); () when the fs's mkfs does
    mkfs_flags: tuple[str, ...]  # the filesystem's mkfs options naming it
    mount_option: str  # always given: the superblock's device number is the recording's
    # The host checker's flags, before the image; None: the checker cannot be told (btrfs
    # check finds a filesystem's other devices among the block devices only), so the
    # guest's checker, which sees only this state's two devices, is the one check.
    check_flags: tuple[str, ...] | None
    # Several states of one recording in a guest are devices of one filesystem id; only
    # a filesystem that names the second device (journal_path=, logdev=) tells them apart.
    alone: bool = False


@dataclass(frozen=True)
class Filesystem:
    name: str
    checker: str  # the host checker's name in results
    # mkfs refuses below this (measured with each mkfs of Debian 12: mkfs.jfs below 16 MiB,
    # mkreiserfs below 40 MiB -- its journal alone is 32 MiB --, mkfs.f2fs below 64 MiB).
    min_disk: int
    mkfs: tuple[str, ...]  # argv before the device: forced and quiet
    # Its own recovery needs no fsck after a crash (a journal, a log, a checkpoint): a
    # repair by fsck is then a finding, and a file fsync makes its name durable.
    # ext3/ext4 made with -O ^has_journal are the exception (config/crash.journaled).
    journaled: bool
    config: str  # the kernel's CONFIG_* option (without the prefix)
    package: str  # the Debian package of its host tools
    version: tuple[str, ...] = ()  # argv printing the host checker's version
    check: tuple[str, ...] = ()  # the full read-only check, argv before the image
    repair: tuple[str, ...] = ()  # the repair, argv before the image
    replay: tuple[str, ...] = ()  # the checker's own log replay, before ``check``
    # False: the kernel refuses to mount a volume its crash left dirty, and the system
    # replays the log with ``replay`` first, as its boot-time fsck does (JFS:
    # jfs_mount.c "Mount Failure: File System Dirty"). A guest mount of a crash state
    # runs ``replay`` first then: without it every dirty state would read mount_failed.
    mount_replays: bool = True
    # Exit statuses of ``repair`` that mean it repaired (not "could not").
    repaired: tuple[int, ...] = (0,)
    # In the check's output: not damage, a log only a mount replays (the guest judges).
    dirty_log: str | None = None
    # The check writes (a log replay of its own): it runs on a sparse copy of the state.
    on_copy: bool = False
    # What the checker must be told to read an image file, not a block device (the host's
    # checks are of files, the guest's of devices).
    file_flag: str = ""
    second_device: SecondDevice | None = None  # its journal or log may live on a second device

    @property
    def before_mount(self) -> tuple[str, ...]:
        """What runs on a crash state's device before the guest mounts it (argv before
        the device); empty when the kernel's mount is the recovery."""
        return () if self.mount_replays else self.replay

    def on_file(self, argv: tuple[str, ...]) -> list[str]:
        """``check`` or ``repair``, made to read an image file."""
        return [*argv, self.file_flag] if self.file_flag else list(argv)


# ext3/ext4's external journal: a whole device made by mke2fs -O journal_dev, whose block
# size the filesystem's mke2fs takes ("Using journal device's blocksize"); 4 KiB, as on
# any disk of the lab's sizes. The superblock names the journal by device number, which
# differs in every guest: journal_path= says where it is now.
EXT_JOURNAL = SecondDevice(
    "journal",
    64 * MiB,
    ("mkfs.ext4", "-F", "-q", "-O", "journal_dev", "-b", "4096"),
    ("-J", "device={dev}"),
    "journal_path={dev}",
    ("-j", "{dev}"),
)
# xfs's external log: mkfs.xfs refuses a log below 64 MiB (xfsprogs 6.1).
XFS_LOG = SecondDevice(
    "log", 80 * MiB, (), ("-l", "logdev={dev},size=64m"), "logdev={dev}", ("-l", "{dev}")
)
# btrfs over two devices, data and metadata mirrored; the kernel learns of the second at
# mount from device= (no udev scan in the lab's guests), the checkers by scanning.
BTRFS_MIRROR = SecondDevice(
    "mirror", 0, (), ("-d", "raid1", "-m", "raid1"), "device={dev}", None, alone=True
)


def _ext(name: str, min_mib: int, journaled: bool) -> Filesystem:
    return Filesystem(
        name,
        "e2fsck",
        min_mib * MiB,
        (f"mkfs.{name}", "-F", "-q"),
        journaled,
        "EXT4_FS",  # ext4.ko serves ext2 and ext3 too (EXT4_USE_FOR_EXT2)
        "e2fsprogs",
        ("e2fsck", "-V"),
        ("e2fsck", "-f", "-n"),
        ("e2fsck", "-f", "-y"),
        repaired=(0, 1, 2),
        second_device=EXT_JOURNAL if journaled else None,
    )


FILESYSTEMS: dict[str, Filesystem] = {
    "ext2": _ext("ext2", 8, False),
    "ext3": _ext("ext3", 16, True),
    "ext4": _ext("ext4", 16, True),
    "xfs": Filesystem(
        "xfs",
        "xfs_repair -n",
        300 * MiB,  # xfsprogs >= 5.19
        ("mkfs.xfs", "-f", "-q"),
        True,
        "XFS_FS",
        "xfsprogs",
        ("xfs_repair", "-V"),
        ("xfs_repair", "-n"),
        ("xfs_repair",),
        dirty_log="metadata changes in a log",
        file_flag="-f",
        second_device=XFS_LOG,
    ),
    "btrfs": Filesystem(
        "btrfs",
        "btrfs check",
        128 * MiB,  # btrfs-progs asks for 109-128 MiB depending on the version
        ("mkfs.btrfs", "-f", "-q"),
        True,
        "BTRFS_FS",
        "btrfs-progs",
        ("btrfs", "--version"),
        ("btrfs", "check", "--readonly"),
        ("btrfs", "check", "--repair", "--force"),
        second_device=BTRFS_MIRROR,
    ),
    # JFS logs metadata only; fsck.jfs replays the log, then -n checks without writing
    # (exit 0: clean). -f checks and repairs everything; 1 says it corrected errors.
    "jfs": Filesystem(
        "jfs",
        "fsck.jfs",
        16 * MiB,
        ("mkfs.jfs", "-q"),
        True,
        "JFS_FS",
        "jfsutils",
        ("fsck.jfs", "-V"),
        ("fsck.jfs", "-n"),
        ("fsck.jfs", "-f"),
        ("fsck.jfs", "--replay_journal_only"),
        repaired=(0, 1),
        mount_replays=False,
        on_copy=True,
    ),
    # reiserfsck replays the journal before any check (on the copy here); --check exits
    # 0 clean, 4 fixable with --fix-fixable, 6 only by --rebuild-tree.
    "reiserfs": Filesystem(
        "reiserfs",
        "reiserfsck",
        40 * MiB,
        ("mkfs.reiserfs", "-q", "-f", "-f"),
        True,
        "REISERFS_FS",
        "reiserfsprogs",
        ("reiserfsck", "-V"),
        ("reiserfsck", "--check", "-q", "-y"),
        ("reiserfsck", "--fix-fixable", "-q", "-y"),
        repaired=(0, 1),
        on_copy=True,
    ),
    # F2FS: checkpoints, and roll-forward of fsync'd nodes at mount; fsck.f2fs
    # --dry-run changes nothing, -a fixes what it finds.
    "f2fs": Filesystem(
        "f2fs",
        "fsck.f2fs",
        64 * MiB,
        ("mkfs.f2fs", "-f", "-q"),
        True,
        "F2FS_FS",
        "f2fs-tools",
        ("fsck.f2fs", "-V"),
        ("fsck.f2fs", "--dry-run"),
        ("fsck.f2fs", "-a"),
    ),
}


def get(name: str) -> Filesystem:
    """:raise KeyError: not a filesystem the lab knows (the scenario's model says which)."""
    return FILESYSTEMS[name]
