"""Device-mapper faults: what a failing disk does to the I/O a filesystem sends it.

Data, like the disk faults: a scenario's ``[fault]`` table becomes a frozen record, and
the record says exactly which device-mapper table the guest loads (``table_args``), so
the store keeps the fault as it was applied. The guest loads the table with ``dmsetup
load`` between ``suspend --nolockfs`` and ``resume`` -- no freeze, so the switch itself
flushes nothing the experiment measures.

dm-flakey (Documentation/admin-guide/device-mapper/dm-flakey.rst): the target is up for
``up`` seconds, then misbehaves for ``down`` seconds, and again. "Switched" faults are
loaded with up = 0 and a down interval longer than any experiment, so the fault holds
from the reload until the next one. Modes: ``drop_writes`` (writes silently ignored),
``error_writes`` (writes fail with EIO), ``error_reads``, ``error`` (all I/O fails: the
target's default without features), ``corrupt_bio_byte`` (byte ``nth`` of each matching
bio set to ``value``; ``direction`` r or w; ``flags`` the bio flags a bio must carry, e.g.
REQ_META, to be corrupted).

dm-dust (dm-dust.rst): reads of listed bad blocks fail once enabled; a write to a bad
block clears it, as on a real disk that remaps a sector on write.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Longer than any experiment: a switched fault holds until the next reload.
FOREVER = 86400
# include/linux/blk_types.h, kernel 6.1: REQ_META is bit 12 of bi_opf (__REQ_META = 12,
# counted from REQ_OP_BITS = 8 + 4 flags before it); dm-flakey compares bi_opf bits.
REQ_FLAGS = {"meta": 1 << 12, "sync": 1 << 11, "fua": 1 << 17, "preflush": 1 << 18}


class FlakeyMode(StrEnum):
    DROP_WRITES = "drop_writes"
    ERROR_WRITES = "error_writes"
    ERROR_READS = "error_reads"
    ERROR = "error"
    CORRUPT = "corrupt_bio_byte"


@dataclass(frozen=True)
class FlakeyFault:
    mode: FlakeyMode
    nth: int = 1  # CORRUPT: 1-based byte of the bio
    direction: str = "w"  # CORRUPT: "r" or "w"
    value: int = 0  # CORRUPT: the byte written there
    flags: tuple[str, ...] = ()  # CORRUPT: only bios with these flags (REQ_FLAGS keys)
    up: int = 0  # seconds up, then ``down`` seconds faulty; 0/0 = switched (always faulty)
    down: int = 0

    def features(self) -> list[str]:
        """The optional feature arguments of the flakey table, counted."""
        if self.mode is FlakeyMode.ERROR:
            return []
        if self.mode is FlakeyMode.CORRUPT:
            mask = sum(REQ_FLAGS[f] for f in self.flags)
            args = ["corrupt_bio_byte", str(self.nth), self.direction, str(self.value), str(mask)]
            return [str(len(args)), *args]
        return ["1", str(self.mode)]

    def table_args(self, dev: str) -> list[str]:
        """``flakey`` target arguments after the sector range: dev, offset, intervals,
        features."""
        up, down = (self.up, self.down) if self.up or self.down else (0, FOREVER)
        return [dev, "0", str(up), str(down), *self.features()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "flakey",
            "mode": str(self.mode),
            **(
                {"nth": self.nth, "direction": self.direction, "value": self.value}
                if self.mode is FlakeyMode.CORRUPT
                else {}
            ),
            **({"flags": list(self.flags)} if self.flags else {}),
            **({"up": self.up, "down": self.down} if self.up or self.down else {}),
        }


def healthy_table_args(dev: str) -> list[str]:
    """dm-flakey that never misbehaves: up for ``FOREVER``, down for 0."""
    return [dev, "0", str(FOREVER), "0"]
