"""Times: what a whole-inode commit promises of mtime and ctime (rule 20).

A recovered timestamp must be one the inode had between its last whole commit and the
crash: never older than what fsync (where it commits the whole inode) or sync made
durable, never later than the guest's clock when the state's interval closed. atime is
never checked (reads change it, and relatime / noatime leave it stale on purpose).
"""

from __future__ import annotations

import os
from typing import Any

from ...contract import Mismatch, Stamp
from .rule import Found, Rule

RULES = (
    Rule("times", 20, "times", "mtime and ctime between what was made durable and the crash",
         "POSIX fsync(2): file integrity completion covers all file attributes; sync(2)"),
)  # fmt: skip
FIELDS = ("mtime", "ctime")


def stamps(found: Found, path: str, st: os.stat_result, want: dict[str, Any]) -> bool:
    """A file's or directory's times against its requirement (``want["times"]``: the
    values its last whole commit made durable, None where none did)."""
    low = want.get("times")
    if low is None or found.until is None:
        return False  # an oracle written before rule 20, or no commit to hold it to
    for name in FIELDS:
        got = getattr(st, f"st_{name}_ns")
        floor = low.get(name)
        if got > found.until or (floor is not None and got < floor):
            found.mismatched.append(
                Mismatch(path=path, stamp=Stamp(which=name, got=got, low=floor, high=found.until))
            )
            return True
    return False


def directory(found: Found, d: str, want: dict[str, Any] | None) -> None:
    """A durable directory's times (its stat follows no link: a directory is no link)."""
    if want is not None:
        stamps(found, d + "/" if d else "/", os.lstat(found.full(d)), {"times": want})


def describe(path: str, s: Stamp) -> str:
    """A stamp mismatch in a maintainer's words."""
    if s.got > s.high:
        return f"{path} has an {s.which} {(s.got - s.high) / 1e9:.3f} s later than the crash"
    return f"{path} has an {s.which} older than the one its last fsync or sync made durable"
