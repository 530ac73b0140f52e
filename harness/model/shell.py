"""One op as one shell command, from the op table's template (``ops.Spec.shell``).

Two dialects read the same templates: an fstests test's (``$XFS_IO_PROG``,
``$SCRATCH_MNT``, fstests' own ``src/renameat2``; fstests/gen.py) and a plain script's
that a developer runs by hand (``xfs_io``, paths under ``"$M"``; triage/workload.py).
The bytes are xfs_io's fill pattern (0xcd): the oracle keeps a write's offset and length,
never its bytes. An op the table gives no spelling is refused by name (``NoSpelling``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .ops import FALLOC_XFS_IO, SPECS, UTIMES_BASE, Op

PATTERN = 0xCD  # xfs_io pwrite's default fill byte


class NoSpelling(ValueError):
    """An op of the workload that xfs_io, coreutils and fstests' helpers cannot do."""


@dataclass(frozen=True)
class Dialect:
    """The programs and the root a rendering names."""

    root: str
    io: str
    renameat2: str
    setfattr: str
    btrfs: str
    e4defrag: str
    f2fs_io: str
    quiet: str  # a helper's chatter, sent where the test's output is not compared
    quiet_all: str


FSTESTS = Dialect(
    root="$SCRATCH_MNT", io="$XFS_IO_PROG", renameat2="$here/src/renameat2",
    setfattr="$SETFATTR_PROG", btrfs="$BTRFS_UTIL_PROG subvolume", e4defrag="$E4DEFRAG_PROG",
    f2fs_io="$F2FS_IO_PROG", quiet=" >> $seqres.full", quiet_all=" >> $seqres.full 2>&1",
)  # fmt: skip
# renameat2(2) has no coreutils form on Debian 12: fstests' own helper, from its tree.
SCRIPT = Dialect(
    root='"$M"', io="xfs_io", renameat2="src/renameat2", setfattr="setfattr",
    btrfs="btrfs subvolume", e4defrag="e4defrag", f2fs_io="f2fs_io", quiet="", quiet_all="",
)  # fmt: skip


def at(dialect: Dialect, rel: str) -> str:
    """A path under the filesystem's root, quoted for the shell."""
    return dialect.root + (shlex.quote("/" + rel) if rel else "")


def fd_var(fd: str) -> str:
    """The shell variable that holds a descriptor the workload names ``fd``."""
    return "fd_" + "".join(c if c.isalnum() else "_" for c in fd)


def spell(op: Op, dialect: Dialect) -> str:
    """``op`` as a shell line (its data as given; ``fill`` it first for the pattern)."""
    spec = SPECS.get(op.kind)
    if spec is None or not spec.shell:
        why = spec.no_shell if spec else "an op the lab's table does not have"
        raise NoSpelling(
            f"op {op.kind} ({op.path or op.fd}): no xfs_io or coreutils spelling: {why}"
        )

    n = len(op.data)
    flags = {"dwrite": "-d ", "osync_write": "-s ", "odsync_write": "-D "}.get(op.kind, "")
    fields = {
        "io": dialect.io, "renameat2": dialect.renameat2, "setfattr": dialect.setfattr,
        "btrfs": dialect.btrfs, "e4defrag": dialect.e4defrag, "f2fs_io": dialect.f2fs_io,
        "quiet": dialect.quiet,
        "quiet_all": dialect.quiet_all, "flags": flags, "pattern": f"0x{PATTERN:x}",
        "p": at(dialect, op.path), "dst": at(dialect, op.dst), "off": op.offset, "n": n,
        "size": op.size,
        "range": op.size or n, "target": shlex.quote(op.target), "name": shlex.quote(op.name),
        "value": op.data.hex() or "00", "perm": f"{op.perm:o}", "uid": op.uid, "gid": op.gid,
        "time": UTIMES_BASE + op.offset, "fd": fd_var(op.fd),
        "held": f"/proc/self/fd/${{{fd_var(op.fd)}}}",
        "falloc": FALLOC_XFS_IO.get(op.mode, "falloc"),
    }  # fmt: skip
    return spec.shell.format(**fields)
