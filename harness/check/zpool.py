"""Parsers for what OpenZFS prints: ``zpool events -v``, ``zpool status -j``, ``zpool list -Hp``.

Pure functions of text, tested on outputs recorded from the guest (tests/data/zfs/).

Timing: an event's ``time`` is a pair of hex numbers, seconds and nanoseconds. The clock
behind it is the kernel's *coarse* real-time clock (``gethrestime()`` ->
``ktime_get_coarse_real_ts64()``), which advances once per jiffy: 4 ms on Debian's
HZ=250 kernels. The nanosecond field is therefore exact to the tick, not to the
nanosecond; a duration between two events is good to ±1 tick, against the whole seconds
(or minutes) of ``zpool status``. ``tick_ns()`` measures the granularity from the events
themselves so a report can say what resolution it had.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_HEADER = re.compile(r"^\w{3} +\d+ \d{4} [\d:.]+ (\S+)\s*$")
_FIELD = re.compile(r"^ {8}(\w+) = (.*)$")
_DROPPED = re.compile(r"^dropped (\d+) events")


@dataclass(frozen=True)
class ZEvent:
    cls: str
    time_ns: int | None
    fields: Mapping[str, str]


@dataclass(frozen=True)
class Events:
    events: tuple[ZEvent, ...]
    dropped: int = 0

    def of(self, cls: str) -> list[ZEvent]:
        return [e for e in self.events if e.cls == cls]

    def count(self, prefix: str) -> int:
        return sum(1 for e in self.events if e.cls.startswith(prefix))


def parse_time(value: str) -> int:
    """``'0x6b026941 0x206cbe0a'`` -> nanoseconds since the epoch."""
    parts = value.split()
    if len(parts) != 2:
        raise ValueError(f"not a (seconds, nanoseconds) pair: {value!r}")
    sec, nsec = (int(p, 16) for p in parts)
    return sec * 1_000_000_000 + nsec


def parse_events(text: str) -> Events:
    """Every event of ``zpool events -v``, with its top-level fields (nested nvlists skipped)."""
    events: list[ZEvent] = []
    dropped = 0
    cls: str | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if cls is not None:
            t = fields.get("time")
            events.append(ZEvent(cls, parse_time(t) if t else None, dict(fields)))

    for line in text.splitlines():
        if m := _DROPPED.match(line):
            dropped += int(m.group(1))
            continue
        if m := _HEADER.match(line):
            flush()
            cls, fields = m.group(1), {}
            continue
        if cls is not None and (m := _FIELD.match(line)):
            fields[m.group(1)] = m.group(2).strip().strip('"')
    flush()
    return Events(tuple(events), dropped)


@dataclass(frozen=True)
class Window:
    """A scan's start and finish from the events; ``None`` where the event is missing."""

    start_ns: int | None
    finish_ns: int | None

    @property
    def seconds(self) -> float | None:
        if self.start_ns is None or self.finish_ns is None:
            return None
        return (self.finish_ns - self.start_ns) / 1e9


def scan_windows(events: Events, kind: str) -> list[Window]:
    """Every ``sysevent.fs.zfs.<kind>_start`` with the first ``_finish`` after it (and
    before the next start): a fault on two disks may resilver twice (a replace during a
    resilver is deferred until it ends), and each scan is timed on its own."""
    starts = sorted(e.time_ns for e in events.of(f"sysevent.fs.zfs.{kind}_start") if e.time_ns)
    finishes = sorted(e.time_ns for e in events.of(f"sysevent.fs.zfs.{kind}_finish") if e.time_ns)
    out = []
    for i, start in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else None
        end = next((f for f in finishes if f >= start and (nxt is None or f <= nxt)), None)
        out.append(Window(start, end))
    if not starts and finishes:
        out.append(Window(None, finishes[-1]))
    return out


def overall(windows: Sequence[Window]) -> Window:
    """From the first start to the last finish: the time to full redundancy."""
    if not windows:
        return Window(None, None)
    return Window(windows[0].start_ns, windows[-1].finish_ns)


def tick_ns(events: Events, candidates: Sequence[int] = (10_000_000, 4_000_000, 1_000_000)) -> int:
    """The coarsest clock tick every event time is a multiple of (within 1 µs), else 1.

    The coarse clock is offset from the epoch by a constant, so look at differences.
    """
    times = sorted({e.time_ns for e in events.events if e.time_ns is not None})
    diffs = [b - a for a, b in itertools.pairwise(times)]
    if len(diffs) < 3:
        return 1
    for tick in candidates:
        if all(min(d % tick, tick - d % tick) < 1_000 for d in diffs):
            return tick
    return 1


@dataclass(frozen=True)
class ScanStats:
    function: str  # SCRUB | RESILVER | ERRORSCRUB | NONE
    state: str  # FINISHED | SCANNING | CANCELED | NONE
    start_time: int | None
    end_time: int | None
    to_examine: int
    examined: int
    issued: int
    processed: int  # bytes repaired
    skipped: int
    errors: int

    @property
    def status_seconds(self) -> int | None:
        """Whole seconds, as ``zpool status`` knows the duration."""
        if self.start_time is None or self.end_time is None:
            return None
        return self.end_time - self.start_time


@dataclass(frozen=True)
class VdevErrors:
    name: str
    vdev_type: str
    state: str
    path: str | None
    read: int
    write: int
    checksum: int
    self_healed: int
    scan_processed: int
    leaf: bool


@dataclass(frozen=True)
class PoolStatus:
    name: str
    state: str
    scan: ScanStats | None
    vdevs: tuple[VdevErrors, ...]
    error_count: int  # permanent (unrecoverable) data errors
    status: str = ""
    action: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def leaves(self) -> list[VdevErrors]:
        return [v for v in self.vdevs if v.leaf]

    def errors_json(self) -> dict[str, Any]:
        return {
            "permanent": self.error_count,
            "vdevs": {
                v.name: {
                    "type": v.vdev_type,
                    "state": v.state,
                    "read": v.read,
                    "write": v.write,
                    "checksum": v.checksum,
                    "self_healed": v.self_healed,
                }
                for v in self.vdevs
            },
        }


def _int(v: Any, default: int = 0) -> int:
    """--json-int gives ints; plain -j gives strings (sometimes with units): take both."""
    if v is None:
        return default
    if isinstance(v, int):
        return v
    try:
        return int(str(v))
    except ValueError:
        return default


def _vdevs(node: Mapping[str, Any]) -> Iterable[VdevErrors]:
    children = node.get("vdevs") or {}
    yield VdevErrors(
        name=str(node.get("name")),
        vdev_type=str(node.get("vdev_type", "")),
        state=str(node.get("state", "")),
        path=node.get("path"),
        read=_int(node.get("read_errors")),
        write=_int(node.get("write_errors")),
        checksum=_int(node.get("checksum_errors")),
        self_healed=_int(node.get("self_healed")),
        scan_processed=_int(node.get("scan_processed")),
        leaf=not children,
    )
    for child in children.values():
        yield from _vdevs(child)


def parse_status(text: str, pool: str) -> PoolStatus:
    """``zpool status -j --json-int POOL`` -> PoolStatus. Raises ValueError if malformed."""
    try:
        data = json.loads(text)
        p = data["pools"][pool]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"not the JSON status of pool {pool!r}: {e}") from None
    scan = None
    if s := p.get("scan_stats"):
        scan = ScanStats(
            function=str(s.get("function", "NONE")),
            state=str(s.get("state", "NONE")),
            start_time=_int(s.get("start_time"), 0) or None,
            end_time=_int(s.get("end_time"), 0) or None,
            to_examine=_int(s.get("to_examine")),
            examined=_int(s.get("examined")),
            issued=_int(s.get("issued")),
            processed=_int(s.get("processed")),
            skipped=_int(s.get("skipped")),
            errors=_int(s.get("errors")),
        )
    vdevs: list[VdevErrors] = []
    for top in (p.get("vdevs") or {}).values():
        vdevs.extend(_vdevs(top))
    # Cache and log devices sit beside the main tree.
    for key in ("l2cache", "logs", "spares"):
        for top in (p.get(key) or {}).values():
            vdevs.extend(_vdevs(top))
    return PoolStatus(
        name=pool,
        state=str(p.get("state", "UNKNOWN")),
        scan=scan,
        vdevs=tuple(vdevs),
        error_count=_int(p.get("error_count")),
        status=str(p.get("status", "")).strip(),
        action=str(p.get("action", "")).strip(),
    )


@dataclass(frozen=True)
class PoolList:
    """``zpool list -Hp POOL``: raw sizes (parity included), in bytes."""

    name: str
    size: int
    alloc: int
    free: int
    frag: int | None
    cap: int
    health: str

    @property
    def alloc_fraction(self) -> float:
        return self.alloc / self.size if self.size else math.nan


def parse_list(text: str) -> PoolList:
    cols = text.strip().split("\t")
    if len(cols) < 10:
        raise ValueError(f"not a line of `zpool list -Hp`: {text!r}")
    frag = None if cols[6] == "-" else int(cols[6])
    return PoolList(cols[0], int(cols[1]), int(cols[2]), int(cols[3]), frag, int(cols[7]), cols[9])


def parse_used_available(text: str) -> tuple[int, int]:
    """``zfs get -Hp -o property,value used,available POOL`` -> (used, available)."""
    values: dict[str, int] = {}
    for line in text.strip().splitlines():
        cols = line.split("\t")
        if len(cols) >= 2:
            values[cols[-2]] = int(cols[-1])
    try:
        return values["used"], values["available"]
    except KeyError:
        raise ValueError(f"no used/available in: {text!r}") from None
