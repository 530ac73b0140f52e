"""Disk faults: damage applied from the host to a guest's raw disk files.

The vocabulary of the ZFS lab (and of any experiment on whole disks): zeros over a byte
range, zeros over a percentage of a disk (with or without the ZFS labels), random bit
flips, a whole disk wiped. A ``DiskFault`` is data, parsed from a scenario's ``[fault]``
table; ``apply()`` runs it on the disk files and returns what it changed, so the store
keeps the exact damage and not only its description.

ZFS keeps four copies of its vdev label, two in the first 512 KiB and two in the last
512 KiB of each leaf vdev. Damage "without the labels" leaves those ranges alone, so the
pool still recognises the disk and only the data is bad (a scrub repairs it); damage
"with the labels" may make the disk unrecognisable after an export and import.

The guest's raw disks are opened with ``cache.direct=on``, so bytes written here while
the guest runs are what the guest reads next (its ARC may still hold older copies: that
is what ZFS itself would see after silent corruption, too).

``detach`` is listed for the scenario vocabulary but applied in the guest
(``zpool offline``/``detach``), not here.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

LABEL_BYTES = 512 << 10
CHUNK = 4 << 20
_ZEROS = bytes(CHUNK)


class FaultKind(StrEnum):
    ZERO = "zero"  # zeros over [offset, offset + length)
    ZERO_PERCENT = "zero-percent"  # zeros over percent % of the disk
    BITFLIP = "bitflip"  # count random single-bit flips
    WIPE = "wipe"  # the whole disk zeroed, labels included: a lost disk
    DETACH = "detach"  # the disk taken out of the pool (in the guest)


class When(StrEnum):
    RUNNING = "running"  # while the guest runs, the pool imported
    OFFLINE = "offline"  # between boots: pool exported, guest stopped


@dataclass(frozen=True)
class DiskFault:
    kind: FaultKind
    disks: tuple[int, ...] = (0,)  # indexes into the pool's data disks
    when: When = When.RUNNING
    offset: int = 0  # ZERO: first byte
    length: int = 0  # ZERO: bytes
    percent: float = 0.0  # ZERO_PERCENT
    labels: bool = False  # ZERO_PERCENT / BITFLIP: may the labels be hit?
    count: int = 0  # BITFLIP: flips per disk
    seed: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": str(self.kind),
            "disks": list(self.disks),
            "when": str(self.when),
        }
        if self.kind is FaultKind.ZERO:
            out |= {"offset": self.offset, "length": self.length}
        if self.kind is FaultKind.ZERO_PERCENT:
            out |= {"percent": self.percent, "labels": self.labels}
        if self.kind is FaultKind.BITFLIP:
            out |= {"count": self.count, "labels": self.labels, "seed": self.seed}
        return out

    @property
    def loses_disks(self) -> bool:
        """True when the faulted disks are gone for good and must be replaced."""
        return self.kind in (FaultKind.WIPE, FaultKind.DETACH)


@dataclass(frozen=True)
class Damage:
    """What one fault did to one disk file."""

    path: str
    kind: FaultKind
    ranges: tuple[tuple[int, int], ...] = ()  # (offset, length) zeroed
    flips: tuple[tuple[int, int], ...] = ()  # (byte offset, bit)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bytes_zeroed(self) -> int:
        return sum(n for _, n in self.ranges)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": str(self.kind),
            "bytes_zeroed": self.bytes_zeroed,
            "ranges": [list(r) for r in self.ranges],
            "flips": len(self.flips),
        }


def data_area(size: int, labels: bool) -> tuple[int, int]:
    """The (start, end) a fault may touch: the whole disk, or everything but the labels."""
    if labels:
        return 0, size
    if size <= 2 * LABEL_BYTES:
        raise ValueError(f"a disk of {size} bytes has no room outside its ZFS labels")
    return LABEL_BYTES, size - LABEL_BYTES


def zero_range(path: Path, offset: int, length: int) -> Damage:
    """Write zeros over ``[offset, offset + length)``, clipped to the file, and fsync."""
    size = path.stat().st_size
    if offset < 0 or length < 0:
        raise ValueError("offset and length must not be negative")
    end = min(size, offset + length)
    fd = os.open(path, os.O_WRONLY)
    try:
        pos = offset
        while pos < end:
            n = min(CHUNK, end - pos)
            os.pwrite(fd, _ZEROS[:n], pos)
            pos += n
        os.fsync(fd)
    finally:
        os.close(fd)
    done = max(0, end - offset)
    return Damage(str(path), FaultKind.ZERO, ((offset, done),) if done else ())


def zero_percent(path: Path, percent: float, *, labels: bool = False) -> Damage:
    """Zero ``percent`` % of the disk in one run, from the start of the area allowed.

    With ``labels`` false the run starts after the front labels and never reaches the
    back ones; the percentage is then of that data area.
    """
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], not {percent}")
    start, end = data_area(path.stat().st_size, labels)
    length = int((end - start) * percent / 100)
    d = zero_range(path, start, length)
    return Damage(str(path), FaultKind.ZERO_PERCENT, d.ranges, extra={"percent": percent})


def flip_bits(path: Path, count: int, *, seed: int, labels: bool = False) -> Damage:
    """Flip ``count`` distinct random bits (deterministic for a seed); returns where."""
    start, end = data_area(path.stat().st_size, labels)
    rng = random.Random(seed)
    offsets = sorted(rng.sample(range(start, end), count))
    flips = []
    fd = os.open(path, os.O_RDWR)
    try:
        for off in offsets:
            bit = rng.randrange(8)
            byte = os.pread(fd, 1, off) or b"\0"
            os.pwrite(fd, bytes([byte[0] ^ (1 << bit)]), off)
            flips.append((off, bit))
        os.fsync(fd)
    finally:
        os.close(fd)
    return Damage(str(path), FaultKind.BITFLIP, flips=tuple(flips))


def wipe(path: Path) -> Damage:
    """Zero the whole disk, labels included: ZFS sees a blank disk.

    Truncated to nothing and back to its size rather than written over: a file of holes
    reads as zeros, in a millisecond where writing a GiB of zeros took 1.8 s, and it is
    the same inode, so a guest that has the disk open reads the zeros too.
    """
    size = path.stat().st_size
    os.truncate(path, 0)
    os.truncate(path, size)
    return Damage(str(path), FaultKind.WIPE, ((0, size),) if size else ())


def apply(fault: DiskFault, disks: Sequence[Path]) -> list[Damage]:
    """Apply ``fault`` to its disks among ``disks`` (the pool's data disks, in order)."""
    out = []
    for i in fault.disks:
        path = disks[i]
        if fault.kind is FaultKind.ZERO:
            out.append(zero_range(path, fault.offset, fault.length))
        elif fault.kind is FaultKind.ZERO_PERCENT:
            out.append(zero_percent(path, fault.percent, labels=fault.labels))
        elif fault.kind is FaultKind.BITFLIP:
            # One seed per disk, so two disks do not get the same offsets.
            out.append(
                flip_bits(path, fault.count, seed=fault.seed * 1000 + i, labels=fault.labels)
            )
        elif fault.kind is FaultKind.WIPE:
            out.append(wipe(path))
        else:
            out.append(Damage(str(path), fault.kind))
    return out
