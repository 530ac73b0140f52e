"""Logs written by QEMU's blklogwrites: the same format as dm-log-writes' (``logwrites.py``
reads both), but QEMU's block driver updates nr_entries only on a flush and cannot log
marks. These two functions let the host count entries while the guest runs and put the
marks in afterwards, so the rest of the lab reads one format. Apart from logwrites.py,
whose readers never need them."""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path

from harness.record.logwrites import _HEADER, _SUPER, DISCARD, MAGIC, MARK, SECTOR, VERSION


def _walk_headers(mm: mmap.mmap, size: int, ss: int) -> list[tuple[int, int]]:
    """(offset, length) of every entry until the first all-zero header or the end."""
    out: list[tuple[int, int]] = []
    pos = ss
    while pos + _HEADER.size <= size:
        _, nr, flags, _ = _HEADER.unpack_from(mm, pos)
        if not nr and not flags:
            break
        length = ss if flags & (MARK | DISCARD) else (nr + 1) * ss
        if pos + length > size:
            break
        out.append((pos, length))
        pos += length
    return out


def count_entries(path: Path) -> int:
    """Entries written so far to a log that may still be growing (header scan)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _SUPER.size:
            return 0
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
            ss = _SUPER.unpack_from(mm, 0)[3] or SECTOR
            return len(_walk_headers(mm, size, ss))


def insert_marks(path: Path, marks: Sequence[tuple[int, str]]) -> None:
    """Rewrite the log at ``path`` with a MARK entry before entry ``n`` for each
    ``(n, text)`` (n = entries logged when the mark was taken), and nr_entries set."""
    tmp = path.with_name(path.name + ".marks")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
            ss = _SUPER.unpack_from(mm, 0)[3] or SECTOR
            entries = _walk_headers(mm, size, ss)
            pending = sorted(marks, key=lambda m: m[0])
            with open(tmp, "wb") as out:
                out.write(
                    _SUPER.pack(MAGIC, VERSION, len(entries) + len(pending), ss).ljust(ss, b"\0")
                )
                for i, (pos, length) in enumerate([*entries, (size, 0)]):
                    while pending and pending[0][0] <= i:
                        text = pending.pop(0)[1].encode()[: ss - _HEADER.size]
                        out.write((_HEADER.pack(0, 0, MARK, len(text)) + text).ljust(ss, b"\0"))
                    if length:
                        out.write(mm[pos : pos + length])
    tmp.replace(path)
