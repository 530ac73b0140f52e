"""Data: what fsync, fdatasync and sync promise of a file's bytes (rules 1, 4 and 10)."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ...contract import Mismatch
from .rule import Found, Rule

RULES = (
    Rule("content", 1, "data", "fsync'd content must be there, size and sha256",
         "POSIX fsync(2), fdatasync(2)"),
    Rule("append-prefix", 4, "data", "an appended file keeps its durable prefix",
         "write(2): an append never changes bytes before the old end"),
    Rule("unreadable", 1, "data", "a required file must be readable",
         "POSIX fsync(2): durable data is data that can be read back"),
)  # fmt: skip


def file_digest(path: str, limit: int | None = None) -> tuple[str, int]:
    """sha256 and length of the file (of its first ``limit`` bytes)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20 if limit is None else min(1 << 20, limit - size)):
            h.update(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
    return h.hexdigest(), size


def content(
    found: Found, path: str, want: dict[str, Any], limit: int | None = None
) -> os.stat_result | None:
    """The file's bytes (its first ``limit``) and size; its stat when the whole file
    holds what ``want`` requires (the inode's rules are checked next), else None."""
    full = found.full(path)
    if not os.path.isfile(full) or os.path.islink(full):
        found.missing.append(path)  # rule 1's name (names.py's file-missing)
        return None
    try:
        got, size = file_digest(full, limit)
        st = os.stat(full)
    except OSError as e:
        found.mismatched.append(Mismatch(path=path, error=e.strerror))
        return None
    if limit is not None and size < limit:
        found.mismatched.append(Mismatch(path=path, prefix=limit, size=size))
    elif got != want["sha256"] or (limit is None and st.st_size != want["size"]):
        found.mismatched.append(
            Mismatch(
                path=path,
                expected=want["sha256"],
                got=got,
                size=st.st_size,
                expected_size=want["size"],
            )
        )
    elif limit is None:
        return st
    return None
