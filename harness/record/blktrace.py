"""blktrace's binary trace, read on the host: what the device under test was asked to do.

``blktrace -d DEV -o NAME`` in the guest writes one file per CPU (``NAME.blktrace.N``), a
stream of ``struct blk_io_trace`` records (include/uapi/linux/blktrace_api.h: 48 bytes,
native byte order -- little-endian on the x86 guests here -- each followed by
``pdu_len`` bytes of payload). The high 16 bits of ``action`` are category bits (read,
write, flush, sync, FUA, discard, metadata, ...), the low 16 the event (queued, issued,
completed, merged, ...).

``summarize()`` counts *completed* requests -- what the device actually did -- by kind,
with bytes, a request-size histogram and two latencies: queue-to-complete (Q2C, what the
filesystem waited) and issue-to-complete (D2C, what the device took). A completion is
matched to the queue/issue events of the sectors it covers, so a request built from
merged bios counts once, timed from its first bio. The result is the block-level
evidence the workload experiments store beside fio's numbers: bytes the device received
over bytes the application wrote is the write amplification.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError

MAGIC = 0x65617400
VERSION = 0x07
_REC = struct.Struct("<IIQQIIIIIHH")
SECTOR = 512

# Categories (action >> 16) and events (action & 0xffff), blktrace_api.h.
TC_READ, TC_WRITE, TC_FLUSH, TC_SYNC = 1 << 0, 1 << 1, 1 << 2, 1 << 3
TC_NOTIFY, TC_AHEAD, TC_META, TC_DISCARD, TC_FUA = 1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 15
TA_QUEUE, TA_ISSUE, TA_COMPLETE = 1, 7, 8


@dataclass(frozen=True, slots=True)
class Event:
    time_ns: int
    sector: int
    bytes: int
    event: int  # TA_*
    cats: int  # TC_* bits
    error: int
    cpu: int


def read_events(paths: Iterable[Path]) -> list[Event]:
    """Every record of the per-CPU files, merged by time; notify records are skipped.

    :raise InputError: a file that is not a blktrace stream, or is cut mid-record.
    """
    out: list[Event] = []
    for p in paths:
        out.extend(_read(p))
    out.sort(key=lambda e: e.time_ns)
    return out


def _read(path: Path) -> Iterator[Event]:
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        if pos + _REC.size > len(data):
            raise InputError(f"{path}: blktrace record cut short at byte {pos}")
        magic, _seq, t, sector, nbytes, action, _pid, _dev, cpu, error, pdu = _REC.unpack_from(
            data, pos
        )
        if magic & 0xFFFFFF00 != MAGIC or magic & 0xFF != VERSION:
            raise InputError(
                f"{path}: not a blktrace v{VERSION} stream at byte {pos} (magic {magic:#x})",
                hint="the trace files are the NAME.blktrace.N files blktrace writes",
            )
        pos += _REC.size + pdu
        cats = action >> 16
        if not cats & TC_NOTIFY:
            yield Event(t, sector, nbytes, action & 0xFFFF, cats, error, cpu)


def kind(cats: int, nbytes: int) -> str:
    """One word per completed request, the most specific first."""
    if cats & TC_DISCARD:
        return "discard"
    if cats & TC_FLUSH and nbytes == 0:
        return "flush"
    if cats & TC_WRITE:
        if cats & TC_FUA:
            return "fua_write"
        return "sync_write" if cats & TC_SYNC else "write"
    return "read" if cats & TC_READ else "other"


@dataclass
class Summary:
    requests: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)  # power-of-2 bytes -> requests
    q2c_ns: list[int] = field(default_factory=list)
    d2c_ns: list[int] = field(default_factory=list)
    errors: int = 0
    metadata: int = 0
    preflush: int = 0  # data writes that carried a FLUSH before them
    seconds: float = 0.0

    @property
    def write_bytes(self) -> int:
        return sum(v for k, v in self.bytes.items() if k.endswith("write"))

    @property
    def read_bytes(self) -> int:
        return self.bytes.get("read", 0)

    @property
    def flushes(self) -> int:
        return self.requests.get("flush", 0) + self.preflush

    def to_dict(self) -> dict[str, object]:
        return {
            "requests": dict(sorted(self.requests.items())),
            "bytes": dict(sorted(self.bytes.items())),
            "size_histogram": {str(k): v for k, v in sorted(self.sizes.items())},
            "write_bytes": self.write_bytes,
            "read_bytes": self.read_bytes,
            "flushes": self.flushes,
            "fua_writes": self.requests.get("fua_write", 0),
            "metadata_requests": self.metadata,
            "errors": self.errors,
            "q2c_ms": _percentiles(self.q2c_ns),
            "d2c_ms": _percentiles(self.d2c_ns),
            "seconds": round(self.seconds, 6),
        }


class _Pending:
    """Queue or issue times by start sector, for matching a completion to its bios."""

    def __init__(self) -> None:
        self.sectors: list[int] = []
        self.times: dict[int, int] = {}

    def add(self, sector: int, t: int) -> None:
        if sector not in self.times:
            bisect.insort(self.sectors, sector)
            self.times[sector] = t

    def take(self, lo: int, hi: int) -> int | None:
        """Remove every entry in sectors [lo, max(hi, lo + 1)); the earliest time."""
        i = bisect.bisect_left(self.sectors, lo)
        j = bisect.bisect_left(self.sectors, max(hi, lo + 1))
        if i == j:
            return None
        taken = self.sectors[i:j]
        del self.sectors[i:j]
        return min(self.times.pop(s) for s in taken)


def summarize(events: Iterable[Event]) -> Summary:
    s = Summary()
    queued, issued = _Pending(), _Pending()
    first = last = None
    for e in events:
        first = e.time_ns if first is None else first
        last = e.time_ns
        # Flushes carry no sector range: keyed on a sector no data request uses.
        key = -1 if e.bytes == 0 else e.sector
        if e.event == TA_QUEUE:
            queued.add(key, e.time_ns)
        elif e.event == TA_ISSUE:
            issued.add(key, e.time_ns)
        elif e.event == TA_COMPLETE:
            _complete(s, e, key, queued, issued)
    if first is not None and last is not None:
        s.seconds = (last - first) / 1e9
    return s


def _complete(s: Summary, e: Event, key: int, queued: _Pending, issued: _Pending) -> None:
    k = kind(e.cats, e.bytes)
    s.requests[k] = s.requests.get(k, 0) + 1
    s.bytes[k] = s.bytes.get(k, 0) + e.bytes
    if e.bytes:
        bucket = 1 << max(0, (e.bytes - 1).bit_length())
        s.sizes[bucket] = s.sizes.get(bucket, 0) + 1
        if e.cats & TC_FLUSH:
            s.preflush += 1
    s.errors += 1 if e.error else 0
    s.metadata += 1 if e.cats & TC_META else 0
    hi = key + e.bytes // SECTOR
    for pending, out in ((queued, s.q2c_ns), (issued, s.d2c_ns)):
        t = pending.take(key, hi)
        if t is not None:
            out.append(e.time_ns - t)


def _percentiles(ns: list[int]) -> dict[str, float]:
    if not ns:
        return {}
    v = sorted(ns)

    def at(q: float) -> float:
        return round(v[min(len(v) - 1, int(q * len(v)))] / 1e6, 4)

    return {"n": len(v), "p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": at(1.0)}


def trace_files(directory: Path, name: str) -> list[Path]:
    """The per-CPU files of trace ``name`` in ``directory``.

    :raise InputError: none found.
    """
    files = sorted(directory.glob(f"{name}.blktrace.*"))
    if not files:
        raise InputError(f"{directory}: no {name}.blktrace.N files")
    return files
