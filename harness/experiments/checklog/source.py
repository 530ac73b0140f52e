"""What a log recorded elsewhere must satisfy before its states are checked, each failure
bad input naming the log, the entry and the value: where its states start (a mark that is
in it, an entry it has), whether the device holds every write, and the oracle file."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.settings import size_text
from harness.errors import InputError
from harness.record.logwrites import Log, marks_text


@dataclass(frozen=True)
class Start:
    """The entry states start after, and how it was chosen (said in the run's summary)."""

    entry: int
    says: str


def resolve_start(lg: Log, after_mark: str | None, after_entry: int | None) -> Start:
    """Where states start: after ``after_entry``, after the mark ``after_mark``, or, with
    neither, after the log's first mark (the lab's ``crashlab:mkfs``, fstests' ``mkfs``).

    :raise InputError: the entry is not in the log, the mark is not (listing the marks it
        has), or neither was given and the log has no mark.
    """
    if after_entry is not None:
        if after_entry >= len(lg):
            raise InputError(
                f"{lg.path}: --after-entry {after_entry}: the log has {len(lg)} entries "
                f"(0..{len(lg) - 1})"
            )
        return Start(after_entry, f"after entry {after_entry} (--after-entry)")
    if after_mark is not None:
        found = lg.find_mark(after_mark)
        if found is None:
            raise InputError(
                f"{lg.path}: --after-mark {after_mark!r}: no such mark in the log",
                hint=f"its marks: {marks_text(lg)}",
            )
        return Start(found, f"after mark {after_mark!r} (entry {found})")
    if not lg.marks:
        raise InputError(
            f"{lg.path}: the log has no marks, so it does not say where its filesystem "
            "was complete",
            hint="give --after-entry N (the last entry of mkfs)",
        )
    first = next(iter(lg.marks))
    return Start(
        first,
        f"after the log's first mark {lg.marks[first]!r} (entry {first}): "
        "neither --after-mark nor --after-entry was given",
    )


def require_fits(lg: Log, size: int) -> None:
    """:raise InputError: an entry writes or discards past the end of a ``size``-byte
    device, naming the first such entry and how large the device must be."""
    for e in lg.entries:
        if e.nr_sectors and e.offset + e.length > size:
            raise InputError(
                f"{lg.path}: entry {e.index} reaches byte {e.offset + e.length}, past the "
                f"end of a {size_text(size)} ({size} bytes) device",
                hint=f"the recorded device is at least {size_text(_mib(lg.extent()))}: "
                "give its size with --device-size",
            )


def _mib(n: int) -> int:
    return -(-n // (1 << 20)) << 20
