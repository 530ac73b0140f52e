"""Metadata: what a whole-inode commit promises beside the bytes -- link counts,
attributes, mode and owner, a symbolic link's target (rules 7, 8, 13 and 14)."""

from __future__ import annotations

import os
import stat
from typing import Any

from ...contract import Meta, Mismatch, NlinkMiss
from .rule import Found, Rule

RULES = (
    Rule("xattrs", 8, "metadata", "user. attributes as fsync or sync left them",
         "fsync(2) commits the whole inode (ext4, xfs, btrfs); xattr(7)"),
    Rule("nlink", 7, "metadata", "link counts exact after a sync",
         "sync(2) writes the whole inode; stat(2) st_nlink"),
    Rule("symlink", 13, "metadata", "a durable symbolic link reads back its target",
         "symlink(2): the target is the link's data, written with its inode"),
    Rule("mode-owner", 14, "metadata", "mode and owner as fsync or sync left them",
         "fsync(2) commits the whole inode (ext4, xfs, btrfs); chmod(2), chown(2)"),
)  # fmt: skip


def user_xattrs(path: str) -> dict[str, str]:
    """A file's ``user.`` attributes, values in hex (what the oracle stores)."""
    names = sorted(n for n in os.listxattr(path) if n.startswith("user."))
    return {n: os.getxattr(path, n).hex() for n in names}


def link(found: Found, path: str, target: str) -> None:
    """Rule 13: the link itself, never what it points at."""
    full = found.full(path)
    if not os.path.islink(full):
        found.missing.append(path)
    elif (got := os.readlink(full)) != target:
        found.mismatched.append(Mismatch(path=path, symlink=got, expected=target))


def nlink(found: Found, path: str, st: os.stat_result, want: dict[str, Any]) -> bool:
    if "nlink" in want and st.st_nlink != want["nlink"]:
        found.nlink.append(NlinkMiss(path=path, nlink=st.st_nlink, expected=want["nlink"]))
        return True
    return False


def xattrs(found: Found, path: str, st: os.stat_result, want: dict[str, Any]) -> bool:
    if "xattrs" in want and (got := user_xattrs(found.full(path))) != want["xattrs"]:
        found.mismatched.append(Mismatch(path=path, xattrs=got, expected=want["xattrs"]))
        return True
    return False


def mode_owner(found: Found, path: str, st: os.stat_result, want: dict[str, Any]) -> bool:
    """Rule 14: the mode and owner a chmod / chown set, once durable."""
    if ("mode" not in want or stat.S_IMODE(st.st_mode) == want["mode"]) and (
        "owner" not in want or [st.st_uid, st.st_gid] == want["owner"]
    ):
        return False
    got = Meta(mode=stat.S_IMODE(st.st_mode), owner=[st.st_uid, st.st_gid])
    found.mismatched.append(
        Mismatch(
            path=path,
            metadata=got,
            expected_mode=want.get("mode"),
            expected_owner=want.get("owner"),
        )
    )
    return True
