"""Names: which names a crash keeps and which stay gone (rules 1, 5, 6, 9 and 10)."""

from __future__ import annotations

import os

from ...contract import Mismatch
from .data import file_digest
from .rule import Found, Rule

RULES = (
    Rule("file-missing", 1, "names", "a durable name must exist (rule 10: a new file, empty)",
         "POSIX fsync(2) and a directory's fsync; ext4/xfs/btrfs persist the fsync'd name"),
    Rule("dir-missing", 9, "names", "a durable directory must exist",
         "fsync(2) of the parent directory, or sync(2)"),
    Rule("rename-atomic", 5, "names", "rename-over leaves the old or the new content",
         "POSIX rename(2): the target is replaced atomically"),
    Rule("removal-undone", 6, "names", "a durably removed name stays gone (rule 15: an fsync'd"
         " unlinked-but-open file)", "unlink(2) + directory fsync; fstests generic/764, /792"),
)  # fmt: skip


def directory(found: Found, d: str) -> bool:
    """A durable directory is there (rule 9)."""
    if os.path.isdir(found.full(d)):
        return True
    found.missing.append(d + "/")
    return False


def named(found: Found, name: str) -> None:
    """A name made durable with its inode but not its data (a log flush) is there, a
    regular file with any content (rule 1's name)."""
    if not os.path.isfile(found.full(name)):
        found.missing.append(name)


def absent(found: Found, name: str) -> None:
    """A durably removed name stays gone (rule 6)."""
    if os.path.lexists(found.full(name)):
        found.present.append(name)


def either(found: Found, path: str, shas: list[str]) -> None:
    """The file holds one of ``shas``: any of them is what the mark allows (rule 5)."""
    full = found.full(path)
    if not os.path.isfile(full):
        found.missing.append(path)
        return
    try:
        got, _ = file_digest(full)
    except OSError as e:
        found.mismatched.append(Mismatch(path=path, error=e.strerror))
        return
    if got not in shas:
        found.mismatched.append(Mismatch(path=path, either=shas, got=got))
