"""Write synthetic dm-log-writes logs for unit tests, plus a plain-Python model of the device.

The layout mirrors the kernel's (see harness/record/logwrites.py): super block in sector 0,
then per entry one header sector and, for writes, the data. ``sector`` arguments are
in 512-byte units, as in the parsed log; they are converted to the log's ``sectorsize``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.record.logwrites import DISCARD, FLUSH, FUA, MAGIC, MARK, METADATA, SECTOR, VERSION

MKFS_MARK = "crashlab:mkfs"


@dataclass(frozen=True, slots=True)
class Op:
    sector: int  # 512-byte units
    nr_sectors: int
    flags: int
    data: bytes = b""
    mark: str | None = None


@dataclass
class LogBuilder:
    sectorsize: int = 512
    ops: list[Op] = field(default_factory=list)

    def _check(self, sector: int, nr_sectors: int) -> None:
        scale = self.sectorsize // SECTOR
        assert sector % scale == 0 and nr_sectors % scale == 0, "unaligned for sectorsize"

    def write(self, sector: int, data: bytes, flags: int = 0) -> LogBuilder:
        assert data and len(data) % SECTOR == 0
        self._check(sector, len(data) // SECTOR)
        self.ops.append(Op(sector, len(data) // SECTOR, flags, bytes(data)))
        return self

    def flush(self) -> LogBuilder:
        self.ops.append(Op(0, 0, FLUSH))
        return self

    def discard(self, sector: int, nr_sectors: int) -> LogBuilder:
        self._check(sector, nr_sectors)
        self.ops.append(Op(sector, nr_sectors, DISCARD))
        return self

    def mark(self, text: str) -> LogBuilder:
        self.ops.append(Op(0, 0, MARK, mark=text))
        return self

    def to_bytes(self, nr_entries: int | None = None) -> bytes:
        ss = self.sectorsize
        scale = ss // SECTOR
        n = len(self.ops) if nr_entries is None else nr_entries
        out = bytearray(struct.pack("<QQQI", MAGIC, VERSION, n, ss).ljust(ss, b"\0"))
        for op in self.ops:
            text = op.mark.encode() if op.mark is not None else b""
            header = struct.pack(
                "<QQQQ", op.sector // scale, op.nr_sectors // scale, op.flags, len(text)
            )
            out += (header + text).ljust(ss, b"\0")
            if not op.flags & DISCARD:
                out += op.data
        return bytes(out)

    def build(self, path: Path, nr_entries: int | None = None) -> Path:
        path.write_bytes(self.to_bytes(nr_entries))
        return path


def random_builder(
    rng: random.Random,
    n: int,
    device_sectors: int,
    sectorsize: int = 512,
    max_len: int = 16,
    *,
    mkfs_at: int = 3,
) -> LogBuilder:
    """A random workload: writes (some FUA, FLUSH or METADATA), flushes, discards and
    ``crashlab:sync:<k>`` marks, with ``crashlab:mkfs`` after ``mkfs_at`` entries."""
    scale = sectorsize // SECTOR
    b = LogBuilder(sectorsize)
    sync = 0
    for i in range(n):
        if i == mkfs_at:
            b.flush().mark(MKFS_MARK)
            continue
        r = rng.random()
        units = device_sectors // scale
        if r < 0.65:
            cnt = rng.randint(1, max_len)
            start = rng.randrange(0, units - cnt + 1)
            flags = rng.choice([0, 0, 0, 0, FUA, FLUSH, FLUSH | FUA, METADATA])
            b.write(start * scale, rng.randbytes(cnt * sectorsize), flags)
        elif r < 0.78:
            b.flush()
        elif r < 0.88:
            cnt = rng.randint(1, max_len)
            start = rng.randrange(0, units - cnt + 1)
            b.discard(start * scale, cnt * scale)
        else:
            sync += 1
            b.flush().mark(f"crashlab:sync:{sync}")
    return b


def model_image(
    ops: list[Op],
    size: int,
    entries: Iterable[int],
    torn: tuple[int, Iterable[tuple[int, int]]] | None = None,
) -> bytes:
    """The device after applying ``ops[i]`` for i in ``entries`` (in order), then, if
    given, the torn entry's runs of (first 512-byte sector, count) — byte by byte."""
    img = bytearray(size)
    todo: list[tuple[int, Iterable[tuple[int, int]] | None]] = [(i, None) for i in entries]
    if torn is not None:
        todo.append(torn)
    for i, runs in sorted(todo, key=lambda t: t[0]):
        op = ops[i]
        off = op.sector * SECTOR
        if op.flags & DISCARD:
            img[off : off + op.nr_sectors * SECTOR] = bytes(op.nr_sectors * SECTOR)
        elif op.data:
            if runs is None:
                img[off : off + len(op.data)] = op.data
            else:
                for s, c in runs:
                    img[off + s * SECTOR : off + (s + c) * SECTOR] = op.data[
                        s * SECTOR : (s + c) * SECTOR
                    ]
    return bytes(img)
