"""Parse a dm-log-writes log: the record of every write a workload sent to the device.

On-disk format, as written by the kernel (drivers/md/dm-log-writes.c, the 5.18+/6.x
version: ``log_writes_ctr``, ``log_writes_kthread``, ``log_one_block``) and read by
fstests (src/log-writes/log-writes.c: ``log_open``, ``log_replay_next_entry``)::

    byte 0          super: le64 magic, le64 version, le64 nr_entries, le32 sectorsize
    byte sectorsize entry 0: one sector = 32-byte header (le64 sector, nr_sectors, flags,
                    data_len) + mark text for MARK entries, zero padded
                    then nr_sectors * sectorsize bytes of written data, except for
                    DISCARD (no data in the log) and MARK / bare FLUSH (nr_sectors = 0)
                    entry 1 ...

Units: ``sectorsize`` is the *logical block size of the recorded device*
(``bdev_logical_block_size``), and the kernel stores ``sector`` and ``nr_sectors`` in
those units (``bio_to_dev_sectors`` shifts the bio's 512-byte sectors right by
``sectorshift - 9``); replay-log multiplies both by ``log->sectorsize``. They are 512-byte
units only when the device has 512-byte logical blocks. We normalise both to 512-byte
sectors so the rest of the lab never sees the log's unit.

``data_len`` in the header is *not* the length of the written data: the kernel only sets
it for MARK entries (the length of the mark text). The data of a write always occupies
``nr_sectors * sectorsize`` bytes.

``nr_entries`` is rewritten only after a FUA or a MARK entry (``log_super``), and the
target logs a final ``dm-log-writes-end`` mark on teardown; like replay-log we trust it
and ignore whatever lies beyond the last counted entry. (QEMU's blklogwrites writes the
same format with fewer counts and no marks: ``blklogwrites.py`` counts and marks them.)
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import overload

from harness.errors import InputError

FLUSH = 1 << 0
FUA = 1 << 1
DISCARD = 1 << 2
MARK = 1 << 3
METADATA = 1 << 4
KNOWN_FLAGS = FLUSH | FUA | DISCARD | MARK | METADATA

MAGIC = 0x6A736677736872
VERSION = 1
SECTOR = 512

_SUPER = struct.Struct("<QQQI")
_HEADER = struct.Struct("<QQQQ")


@dataclass(frozen=True, slots=True)
class Entry:
    """One logged request; ``sector`` and ``nr_sectors`` are in 512-byte units."""

    index: int
    sector: int
    nr_sectors: int
    flags: int
    data_offset: int  # byte offset of the written data in the log file; 0 if none
    data_len: int  # bytes of written data in the log (== length for writes, else 0)
    mark: str | None

    @property
    def offset(self) -> int:
        """Byte offset on the device."""
        return self.sector * SECTOR

    @property
    def length(self) -> int:
        """Bytes on the device this entry covers (written or discarded)."""
        return self.nr_sectors * SECTOR

    @property
    def is_flush(self) -> bool:
        return bool(self.flags & FLUSH)

    @property
    def is_fua(self) -> bool:
        return bool(self.flags & FUA)

    @property
    def is_mark(self) -> bool:
        return bool(self.flags & MARK)

    @property
    def is_discard(self) -> bool:
        return bool(self.flags & DISCARD)

    @property
    def is_write(self) -> bool:
        """Carries data to put on the device (a FLUSH may carry data too)."""
        return self.data_len > 0


@dataclass(frozen=True, slots=True)
class LogStats:
    entries: int
    writes: int
    flushes: int
    fuas: int
    marks: int
    discards: int
    metadata: int
    bytes_written: int
    bytes_discarded: int


class _Entries(Sequence[Entry]):
    """The log's entries, built on first access from the raw headers: constructing 100k
    frozen dataclasses up front would cost several times the parse itself."""

    __slots__ = ("_cache", "_marks", "_pos", "_raw", "_scale", "_ss")

    def __init__(
        self,
        raw: list[tuple[int, int, int, int]],
        pos: array[int],
        sectorsize: int,
        marks: dict[int, str],
    ) -> None:
        self._raw = raw
        self._pos = pos
        self._ss = sectorsize
        self._scale = sectorsize // SECTOR
        self._marks = marks
        self._cache: list[Entry | None] = [None] * len(raw)

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...
    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self._raw)))]
        e = self._cache[i]
        if e is None:
            if i < 0:
                i += len(self._raw)
            sector, nr, flags, _ = self._raw[i]
            has_data = nr and not flags & DISCARD
            e = Entry(
                i,
                sector * self._scale,
                nr * self._scale,
                flags,
                self._pos[i] + self._ss if has_data else 0,
                nr * self._ss if has_data else 0,
                self._marks.get(i),
            )
            self._cache[i] = e
        return e

    def __iter__(self) -> Iterator[Entry]:
        for i in range(len(self._raw)):
            yield self[i]


class Log:
    """An open, validated log; a context manager holding a read-only mmap of the file.

    Memoryviews returned by :meth:`data` borrow the mmap: release them before
    :meth:`close` (or let them go out of scope).
    """

    def __init__(
        self,
        path: Path,
        mm: mmap.mmap,
        size: int,
        sectorsize: int,
        raw: list[tuple[int, int, int, int]],
        pos: array[int],
        marks: dict[int, str],
    ) -> None:
        self.path = path
        self.sectorsize = sectorsize
        self.size = size
        self.entries: Sequence[Entry] = _Entries(raw, pos, sectorsize, marks)
        self.marks: Mapping[int, str] = marks  # entry index -> mark text, in log order
        self._raw = raw
        self.entries_pos = pos  # byte offset of each entry's header
        self._mm: mmap.mmap | None = mm
        self._view = memoryview(mm)

    def __enter__(self) -> Log:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._raw)

    def close(self) -> None:
        self._view.release()
        if self._mm is not None:
            # A caller may still hold a view of the data; the mmap is then unmapped
            # when that view is collected, so there is nothing worth failing for.
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None

    def release(self) -> None:
        """Let go of the pages of the log this process has touched; they stay in the page
        cache and are mapped again when read. A search holds hundreds of logs open, and
        the pages it had hashed and replayed counted in its resident size: 14.6 GB for
        a whole xfs seq-1 (213 logs of ~70 MB)."""
        if self._mm is not None:
            self._mm.madvise(mmap.MADV_DONTNEED)

    def data(self, e: Entry) -> memoryview:
        """The bytes entry ``e`` wrote (empty for discards, marks and bare flushes).

        :raise ValueError: the log is closed.
        """
        if self._mm is None:
            raise ValueError(f"log {self.path} is closed")
        return self._view[e.data_offset : e.data_offset + e.data_len]

    def raw(self, e: Entry) -> memoryview:
        """Entry ``e`` as the log holds it: its header sector, then its data.

        :raise ValueError: the log is closed.
        """
        if self._mm is None:
            raise ValueError(f"log {self.path} is closed")
        start = int(self.entries_pos[e.index])
        return self._view[start : start + self.sectorsize + e.data_len]

    @cached_property
    def used(self) -> int:
        """Bytes of the file the log occupies: the super block and every entry. The log
        device is larger (and sparse); what lies past this is not part of the log."""
        if not self._raw:
            return self.sectorsize
        _, nr, flags, _ = self._raw[-1]
        data = 0 if flags & (MARK | DISCARD) else nr
        return int(self.entries_pos[-1]) + (1 + data) * self.sectorsize

    @cached_property
    def hash(self) -> str:
        """sha256 of the log's used bytes (not the sparse tail of the log device), hex."""
        h = hashlib.sha256()
        view = self._view[: self.used]
        for off in range(0, len(view), 1 << 22):
            h.update(view[off : off + (1 << 22)])
        view.release()
        self.release()
        return h.hexdigest()

    @cached_property
    def flags(self) -> Sequence[int]:
        """Every entry's flags, without building the entries."""
        return [r[2] for r in self._raw]

    def having(self, mask: int) -> list[int]:
        """Indices of the entries carrying any of the ``mask`` flags."""
        return [i for i, f in enumerate(self.flags) if f & mask]

    def stats(self) -> LogStats:
        ss = self.sectorsize
        writes = flushes = fuas = marks = discards = meta = written = discarded = 0
        for _, nr, f, _ in self._raw:
            if f & DISCARD:
                discards += 1
                discarded += nr * ss
            elif nr:
                writes += 1
                written += nr * ss
            if f & FLUSH:
                flushes += 1
            if f & FUA:
                fuas += 1
            if f & MARK:
                marks += 1
            if f & METADATA:
                meta += 1
        return LogStats(
            len(self._raw), writes, flushes, fuas, marks, discards, meta, written, discarded
        )

    def find_mark(self, text: str) -> int | None:
        """Index of the first MARK entry whose text is ``text``."""
        return next((i for i, m in self.marks.items() if m == text), None)

    def extent(self) -> int:
        """Bytes of device the log touches: the end of its furthest write or discard."""
        return max((s + n for s, n, _, _ in self._raw if n), default=0) * self.sectorsize


MAX_LISTED = 20  # marks named in an error; an ACE log has hundreds


def marks_text(lg: Log) -> str:
    """The log's first marks with their entries, for an error that names a mark it lacks."""
    shown = [f"{m!r} (entry {i})" for i, m in list(lg.marks.items())[:MAX_LISTED]]
    more = len(lg.marks) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "") if shown else "none"


def _corrupt(path: Path, what: str, *, index: int | None = None, offset: int) -> InputError:
    where = (
        f"entry {index} at byte offset {offset}" if index is not None else (f"byte offset {offset}")
    )
    return InputError(
        f"{path}: not a valid dm-log-writes log: {where}: {what}",
        hint="the log is truncated or corrupt; record the workload again",
    )


def open_log(path: Path) -> Log:
    """Open and validate a log; every entry header is parsed, no data is read.

    :raise InputError: the file is missing, not a log, truncated or corrupt.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise InputError(f"cannot open log {path}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        if size < _SUPER.size:
            raise _corrupt(path, f"file is {size} bytes, too short for the super block", offset=0)
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        sectorsize, raw, pos, marks = _parse(path, mm, size)
    except BaseException:
        mm.close()
        raise
    return Log(path, mm, size, sectorsize, raw, pos, marks)


def _parse(
    path: Path, mm: mmap.mmap, size: int
) -> tuple[int, list[tuple[int, int, int, int]], array[int], dict[int, str]]:
    magic, version, nr_entries, ss = _SUPER.unpack_from(mm, 0)
    if magic != MAGIC:
        raise _corrupt(path, f"bad magic {magic:#x}, expected {MAGIC:#x}", offset=0)
    if version != VERSION:
        raise _corrupt(path, f"unsupported version {version}, expected {VERSION}", offset=8)
    if ss < SECTOR or ss & (ss - 1):
        raise _corrupt(path, f"sectorsize {ss} is not a power of two >= 512", offset=24)
    unpack = _HEADER.unpack_from
    raw: list[tuple[int, int, int, int]] = []
    positions = array("q")
    add_raw = raw.append
    add_pos = positions.append
    marks: dict[int, str] = {}
    slow = ~KNOWN_FLAGS | MARK | DISCARD
    last_header = size - ss
    pos = ss
    # The hot loop: one unpack, two appends and one flag test per plain write, locals
    # only, the rare cases (marks, discards, errors) out of the way. 110k entries take
    # ~55 ms.
    for i in range(nr_entries):
        if pos > last_header:
            raise _past_eof(path, raw, positions, nr_entries, ss, size, i, pos)
        t = unpack(mm, pos)
        add_raw(t)
        add_pos(pos)
        flags = t[2]
        if flags & slow:
            if flags & ~KNOWN_FLAGS:
                raise _corrupt(path, f"malformed header (flags {flags:#x})", index=i, offset=pos)
            if flags & MARK:
                marks[i] = _mark(path, mm, i, pos, t[3], ss)
            pos += ss  # a discard's range is not in the log; a mark has no data
            continue
        nr = t[1]
        if not nr and not flags:
            # replay-log's log_entry_valid also rejects the all-zero header: it is what
            # reading an unwritten part of the log device looks like.
            raise _corrupt(path, "malformed header (all zero)", index=i, offset=pos)
        pos += (nr + 1) * ss
    if pos > size:
        raise _past_eof(path, raw, positions, nr_entries, ss, size, nr_entries, pos)
    return ss, raw, positions, marks


def _mark(path: Path, mm: mmap.mmap, i: int, pos: int, length: int, ss: int) -> str:
    if length > ss - _HEADER.size:
        raise _corrupt(path, f"mark length {length} exceeds the header sector", index=i, offset=pos)
    start = pos + _HEADER.size
    return mm[start : start + length].decode("utf-8", "replace")


def _past_eof(
    path: Path,
    raw: list[tuple[int, int, int, int]],
    positions: array[int],
    nr_entries: int,
    ss: int,
    size: int,
    i: int,
    pos: int,
) -> InputError:
    """Name what runs past the end: the previous entry's data, or entry ``i``'s header."""
    if i > 0:
        _, nr, flags, _ = raw[i - 1]
        start = positions[i - 1] + ss
        if nr and not flags & DISCARD and start + nr * ss > size:
            return _corrupt(
                path,
                f"{nr * ss} data bytes at byte offset {start} run past end of file ({size} bytes)",
                index=i - 1,
                offset=start - ss,
            )
    return _corrupt(
        path,
        f"header sector past end of file ({size} bytes); the super "
        f"block claims {nr_entries} entries",
        index=i,
        offset=pos,
    )


def write_slice(lg: Log, indices: Sequence[int], out: Path) -> None:
    """A log of ``lg``'s entries ``indices`` alone, in that order, in the kernel's format
    (what fstests' replay-log reads): the writes of a triaged crash state, say."""
    with open(out, "wb") as f:
        f.write(
            _SUPER.pack(MAGIC, VERSION, len(indices), lg.sectorsize).ljust(lg.sectorsize, b"\0")
        )
        for i in indices:
            view = lg.raw(lg.entries[i])
            try:
                f.write(view)
            finally:
                view.release()
