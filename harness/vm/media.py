"""Disks that behave like a 7,200-rpm HDD or a SATA SSD (seed 003 runs its ZFS factors on
both, and an SSD as L2ARC over HDDs): QEMU's I/O throttling (``throttling.*`` of a drive,
``block_set_io_throttle`` for a hot-plugged one, ``<iotune>`` under libvirt) caps each
disk's operations and bytes per second.

The numbers, and where they come from:

- ``hdd``: a 7,200-rpm SATA disk serves ~80-120 random 4 KiB operations per second (a
  revolution is 8.33 ms, so half of one, 4.17 ms, plus an average seek of ~8.5 ms per
  operation: ~79/s; command queueing gets the rest), and ~160 MB/s sequentially on its
  outer tracks (e.g. Seagate Exos 7E8 / WD Ultrastar data sheets: 195-215 MB/s max
  sustained, less on inner tracks). We use 120 IOPS and 160 MB/s.
- ``ssd``: a SATA SSD is bounded by SATA III's ~550 MB/s and serves ~90-100k random 4 KiB
  reads per second (e.g. Samsung 870 EVO data sheet: 560 MB/s, 98k IOPS). We use 90,000
  IOPS and 530 MB/s.

A throttle caps rates; it does not add a seek per operation, so an HDD's latency under a
queue depth of one is not modelled, only its throughput. Under TCG the guest itself rarely
reaches the SSD's caps: there, ``ssd`` and ``none`` measure alike, and the HDD's caps are
what separates the media (tables say which media each result had).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Media(StrEnum):
    NONE = "none"  # the host file as fast as it goes
    HDD = "hdd"
    SSD = "ssd"


@dataclass(frozen=True)
class Limits:
    iops: int  # operations per second, reads and writes together
    bps: int  # bytes per second, reads and writes together


LIMITS: dict[Media, Limits] = {
    Media.HDD: Limits(iops=120, bps=160_000_000),
    Media.SSD: Limits(iops=90_000, bps=530_000_000),
}


def limits(media: Media | str) -> Limits | None:
    """The caps of ``media``; None for ``none``."""
    return LIMITS.get(Media(media))
