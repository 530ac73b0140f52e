"""Crash states: what the device could hold if power failed at some point of a recorded log.

A state applies log entries ``[0, prefix)`` except those in ``dropped`` (writes still in
the volatile cache when power failed), and optionally persists one entry, ``torn``, only
in part (the 512-byte sector runs ``torn_runs``, relative to the entry's start).

Durability model, from the order dm-log-writes logs requests in (see the comment at the
top of drivers/md/dm-log-writes.c): an entry carrying FLUSH completed after every entry
before it reached stable storage, so entries before the last FLUSH are durable; a FUA
write is durable once logged; any other write or discard after the last FLUSH may be
lost, in any combination. The FLUSH entry's own data, unless FUA, is volatile too:
a pre-flush covers only what completed before it.

Every generator is a pure function of the parsed log, its parameters and a seed. No state
ends before the ``crashlab:mkfs`` mark, and nothing before it is ever dropped or torn:
until mkfs finished there is no filesystem whose crash consistency we could judge. A log
recorded elsewhere (fstests, QEMU) names its own start: ``start``, the entry after which
states begin (fstests' ``mkfs`` mark, say), replaces the lab's mark.

State ids are content addresses: the hash of the log and of what the state applies, not
of the generator that found it. Two generators finding the same state (a FUA that is
also every 100th entry) yield one id, so results join across scenarios and seeds, and
an id always names one image.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.config.states import TORN_MODES, parse_state
from harness.errors import InputError
from harness.record.logwrites import FLUSH, FUA, METADATA, SECTOR, Log, marks_text

MKFS_MARK = "crashlab:mkfs"
SYNC_MARK_PREFIX = "crashlab:sync:"
BLOCK_SECTORS = 4096 // SECTOR
# The flags a torn write must carry for ``only`` (log entry flags).
TORN_ONLY = {"fua": FUA, "flush": FLUSH, "metadata": METADATA}

Runs = tuple[tuple[int, int], ...]


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def state_id(
    log_hash: str, prefix: int, dropped: Sequence[int], torn: int | None, torn_runs: Runs
) -> str:
    key = {
        "log": log_hash,
        "prefix": prefix,
        "dropped": list(dropped),
        "torn": torn,
        "torn_runs": [list(r) for r in torn_runs],
    }
    return hashlib.sha256(_canonical(key).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class CrashState:
    id: str
    log_hash: str
    prefix: int
    dropped: tuple[int, ...] = ()
    torn: int | None = None
    torn_runs: Runs = ()
    mark: str | None = None  # last mark at or before the prefix: what must have survived
    mark_index: int | None = None
    generator: str = ""  # provenance: the spec kind, its parameters and seed
    params: str = "{}"
    seed: int = 0

    @property
    def first_divergent(self) -> int:
        """First entry this state does not apply in full; entries before it are exactly
        the log's, so a replayer may apply them for good."""
        return min(
            (*self.dropped, *(() if self.torn is None else (self.torn,))), default=self.prefix
        )

    @property
    def exact(self) -> bool:
        """Cut exactly at its mark: nothing logged after the mark is in the image."""
        return (
            self.mark_index is not None
            and self.prefix == self.mark_index + 1
            and not self.dropped
            and self.torn is None
        )

    @property
    def sync(self) -> int | None:
        """n of the last ``crashlab:sync:<n>`` mark; None right after mkfs."""
        if self.mark and self.mark.startswith(SYNC_MARK_PREFIX):
            tail = self.mark[len(SYNC_MARK_PREFIX) :]
            return int(tail) if tail.isdigit() else None
        return None

    def describe(self) -> str:
        parts = [f"{self.id}: prefix {self.prefix}"]
        if self.mark is not None:
            parts.append(f"after mark {self.mark!r} (entry {self.mark_index})")
        if self.dropped:
            shown = ", ".join(map(str, self.dropped[:8]))
            more = f" and {len(self.dropped) - 8} more" if len(self.dropped) > 8 else ""
            parts.append(f"losing entries {shown}{more}")
        if self.torn is not None:
            kept = sum(c for _, c in self.torn_runs)
            parts.append(f"tearing entry {self.torn} ({kept} sectors kept)")
        parts.append(f"[{self.generator} {self.params} seed={self.seed}]")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "log_hash": self.log_hash,
            "prefix": self.prefix,
            "dropped": list(self.dropped),
            "torn": self.torn,
            "torn_runs": [list(r) for r in self.torn_runs],
            "mark": self.mark,
            "mark_index": self.mark_index,
            "generator": self.generator,
            "params": json.loads(self.params),
            "seed": self.seed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CrashState:
        """Rebuild a state stored with :meth:`to_dict`.

        :raise InputError: a field is missing or has the wrong type, or the id does not
            match the content (the record was edited or belongs to another version).
        """
        try:
            runs = tuple((int(s), int(c)) for s, c in d["torn_runs"])
            torn = d["torn"]
            mark_index = d["mark_index"]
            state = cls(
                id=str(d["id"]),
                log_hash=str(d["log_hash"]),
                prefix=int(d["prefix"]),
                dropped=tuple(int(i) for i in d["dropped"]),
                torn=None if torn is None else int(torn),
                torn_runs=runs,
                mark=None if d["mark"] is None else str(d["mark"]),
                mark_index=None if mark_index is None else int(mark_index),
                generator=str(d["generator"]),
                params=_canonical(d["params"]),
                seed=int(d["seed"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"malformed crash state record: {e!r}") from None
        want = state_id(state.log_hash, state.prefix, state.dropped, state.torn, runs)
        # A search names each state after its workload too ("seq1-000000/<hash>").
        if want != state.id.rpartition("/")[2]:
            raise InputError(
                f"crash state record {state.id} does not match its content "
                f"(content hashes to {want})"
            )
        return state


@dataclass(frozen=True, slots=True)
class _Index:
    """What every generator needs to know about a log, computed once."""

    log: Log
    mkfs: int  # index of the crashlab:mkfs mark, or of the entry states start after
    marks: list[int]
    flushes: list[int]

    @classmethod
    def of(cls, log: Log, start: int | None = None) -> _Index:
        """``start``: the entry after which states begin; None: the ``crashlab:mkfs`` mark.

        :raise InputError: no start given and the log has no ``crashlab:mkfs`` mark, or
            ``start`` is not an entry of the log.
        """
        if start is not None and not 0 <= start < len(log.entries):
            raise InputError(
                f"{log.path}: no entry {start} to start after: the log has "
                f"{len(log.entries)} entries (0..{len(log.entries) - 1})"
            )
        mkfs = log.find_mark(MKFS_MARK) if start is None else start
        if mkfs is None:
            raise InputError(
                f"{log.path}: the log has no {MKFS_MARK!r} mark, so no entry is known to "
                "follow a complete mkfs",
                hint="record the workload with crashlab",
            )
        marks = list(log.marks)
        flushes = log.having(FLUSH)
        return cls(log, mkfs, marks, flushes)

    @property
    def first(self) -> int:
        """Smallest prefix that is a filesystem crash state: mkfs and its mark applied."""
        return self.mkfs + 1

    def state(
        self,
        gen: str,
        params: str,
        seed: int,
        prefix: int,
        dropped: Iterable[int] = (),
        torn: int | None = None,
        torn_runs: Runs = (),
    ) -> CrashState:
        drop = tuple(sorted(dropped))
        k = bisect.bisect_left(self.marks, prefix) - 1
        mark_index = self.marks[k] if k >= 0 else None
        mark = self.log.marks[mark_index] if mark_index is not None else None
        sid = state_id(self.log.hash, prefix, drop, torn, torn_runs)
        return CrashState(
            sid, self.log.hash, prefix, drop, torn, torn_runs, mark, mark_index, gen, params, seed
        )


def _rng(seed: int, *parts: object) -> random.Random:
    # Derived explicitly so the stream never depends on PYTHONHASHSEED or on the order
    # other generators consumed randomness in.
    digest = hashlib.sha256(_canonical([seed, *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def _prefixes(
    ix: _Index, gen: str, params: str, seed: int, prefixes: Iterable[int]
) -> list[CrashState]:
    keep = sorted({p for p in prefixes if ix.first <= p <= len(ix.log.entries)})
    return [ix.state(gen, params, seed, p) for p in keep]


def at_flushes(log: Log, seed: int = 0, *, start: int | None = None) -> list[CrashState]:
    """Just after each FLUSH completed."""
    ix = _Index.of(log, start)
    return _prefixes(ix, "flush", "{}", seed, (i + 1 for i in ix.flushes))


def at_fuas(log: Log, seed: int = 0, *, start: int | None = None) -> list[CrashState]:
    """Just after each FUA write completed: fstests' generic/482 recipe."""
    ix = _Index.of(log, start)
    return _prefixes(ix, "fua", "{}", seed, (i + 1 for i in log.having(FUA)))


def at_marks(log: Log, seed: int = 0, *, start: int | None = None) -> list[CrashState]:
    """Just after each mark: mkfs done, and each completed sync."""
    ix = _Index.of(log, start)
    return _prefixes(ix, "mark", "{}", seed, (i + 1 for i in ix.marks))


def every(log: Log, n: int, seed: int = 0, *, start: int | None = None) -> list[CrashState]:
    """Every ``n`` entries counted from the mkfs mark."""
    ix = _Index.of(log, start)
    params = _canonical({"n": n})
    return _prefixes(ix, "every", params, seed, range(ix.first + n, len(log.entries) + 1, n))


def at_percent(
    log: Log, at: Sequence[float], seed: int = 0, *, start: int | None = None
) -> list[CrashState]:
    """At the given percentages of the entries after the mkfs mark."""
    ix = _Index.of(log, start)
    params = _canonical({"at": list(at)})
    span = len(log.entries) - ix.first
    return _prefixes(ix, "percent", params, seed, (ix.first + round(p * span / 100) for p in at))


def _subsets(rng: random.Random, items: Sequence[int], limit: int) -> list[tuple[int, ...]]:
    """Non-empty subsets of ``items``: all if there are at most ``limit``, else the
    singletons (the most readable findings) and then random ones, ``limit`` in all."""
    if len(items) < 31 and 2 ** len(items) - 1 <= limit:
        return [c for r in range(1, len(items) + 1) for c in itertools.combinations(items, r)]
    chosen: dict[tuple[int, ...], None] = {}
    if len(items) <= limit:
        chosen.update(((i,), None) for i in items)
    for _ in range(limit * 20):
        if len(chosen) >= limit:
            break
        pick = tuple(i for i in items if rng.random() < 0.5)
        if pick:
            chosen.setdefault(pick, None)
    return list(chosen)


def reorder(
    log: Log,
    seed: int = 0,
    max_states: int = 64,
    per_point: int = 16,
    *,
    start: int | None = None,
) -> list[CrashState]:
    """Power fails just before a FLUSH completes (and at the end of the log): any subset
    of the writes and discards since the previous FLUSH, FUA writes excepted, is lost.

    Exhaustive at a crash point whose droppable set has at most ``per_point`` non-empty
    subsets, a seeded sample otherwise; at most ``max_states`` overall (seeded sample).
    """
    ix = _Index.of(log, start)
    params = _canonical({"max_states": max_states, "per_point": per_point})
    entries = log.entries
    points = sorted({f for f in ix.flushes if f > ix.first} | {len(entries)})
    picks: list[tuple[int, tuple[int, ...]]] = []
    for p in points:
        k = bisect.bisect_left(ix.flushes, p) - 1
        start = max(ix.flushes[k] if k >= 0 else 0, ix.first)
        droppable = [
            i
            for i in range(start, p)
            if (entries[i].is_write or entries[i].is_discard) and not entries[i].is_fua
        ]
        picks += ((p, sub) for sub in _subsets(_rng(seed, "reorder", p), droppable, per_point))
    if len(picks) > max_states:
        picks = _rng(seed, "reorder-cap").sample(picks, max_states)
    states = [ix.state("reorder", params, seed, p, sub) for p, sub in picks]
    return sorted(states, key=lambda s: (s.prefix, s.id))


def _runs(units: Iterable[int], unit: int, nr_sectors: int) -> Runs:
    out: list[tuple[int, int]] = []
    for u in sorted(units):
        s, c = u * unit, min(unit, nr_sectors - u * unit)
        if out and out[-1][0] + out[-1][1] == s:
            out[-1] = (out[-1][0], out[-1][1] + c)
        else:
            out.append((s, c))
    return tuple(out)


def torn_runs(mode: str, nr_sectors: int, rng: random.Random) -> Runs:
    """The sector runs of an ``nr_sectors`` write that reach the disk under ``mode``."""
    if mode == "first-sector":
        return ((0, 1),)
    if mode == "half":
        return ((0, nr_sectors // 2),)
    # "blocks": a random proper subset of its 4 KiB blocks (of its sectors if smaller),
    # since the device may persist a multi-block write in any order.
    unit = BLOCK_SECTORS if nr_sectors >= 2 * BLOCK_SECTORS else 1
    count = -(-nr_sectors // unit)
    keep = rng.sample(range(count), rng.randint(1, count - 1))
    return _runs(keep, unit, nr_sectors)


def torn(
    log: Log,
    seed: int = 0,
    max_states: int = 64,
    modes: Sequence[str] = TORN_MODES,
    only: Sequence[str] = (),
    *,
    start: int | None = None,
) -> list[CrashState]:
    """Power fails during a multi-sector write, which persists only in part; the
    entries before it are applied. ``only`` restricts the candidates to writes carrying
    one of the flags ``fua``, ``flush``, ``metadata`` (journal commits, say)."""
    ix = _Index.of(log, start)
    params = _canonical({"max_states": max_states, "modes": list(modes), "only": list(only)})
    want = sum(TORN_ONLY[o] for o in only)
    candidates = [
        (e.index, m)
        for e in log.entries[ix.first :]
        if e.is_write and e.nr_sectors >= 2 and (not want or e.flags & want)
        for m in modes
    ]
    if len(candidates) > max_states:
        candidates = _rng(seed, "torn-cap").sample(candidates, max_states)
    states = {}
    for i, mode in candidates:
        runs = torn_runs(mode, log.entries[i].nr_sectors, _rng(seed, "torn", i, mode))
        s = ix.state("torn", params, seed, i + 1, (), i, runs)
        states[s.id] = s
    return sorted(states.values(), key=lambda s: (s.prefix, s.id))


# --- specs from scenario TOML -----------------------------------------------------------

Generator = Callable[[Log, Any, int, int | None], list[CrashState]]

_GENERATORS: dict[str, Generator] = {
    "flush": lambda log, s, seed, at: at_flushes(log, seed, start=at),
    "fua": lambda log, s, seed, at: at_fuas(log, seed, start=at),
    "mark": lambda log, s, seed, at: at_marks(log, seed, start=at),
    "every": lambda log, s, seed, at: every(log, s.n, seed, start=at),
    "percent": lambda log, s, seed, at: at_percent(log, s.at, seed, start=at),
    "reorder": lambda log, s, seed, at: reorder(log, seed, s.max_states, s.per_point, start=at),
    "torn": lambda log, s, seed, at: torn(log, seed, s.max_states, s.modes, s.only, start=at),
}
KINDS = tuple(_GENERATORS)


SETUP = "setup"


def start_after(log: Log, after_mark: str, targets: Sequence[Mapping[str, Any]] = ()) -> int | None:
    """The entry ``crash.after_mark`` names: None for the lab's ``crashlab:mkfs`` (the
    generators' default); for ``setup``, the mark before the first update of a pattern
    workload's ``targets`` (their ``start_n``, harness/guest/apppat.py).

    :raise InputError: ``setup`` without pattern targets, or a mark the log does not have
        (listing the first ones it has).
    """
    if after_mark == MKFS_MARK:
        return None
    text = after_mark
    if after_mark == SETUP:
        if not targets:
            raise InputError(
                "crash.after_mark = 'setup': the workload is not an application pattern, "
                "so it has no setup",
                hint="give a mark of the log (crashlab:sync:N), or leave crash.after_mark out",
            )
        text = f"{SYNC_MARK_PREFIX}{min(int(t['start_n']) for t in targets)}"
    found = log.find_mark(text)
    if found is None:
        raise InputError(
            f"crash.after_mark = {after_mark!r}: the log has no mark {text!r}",
            hint=f"its marks: {marks_text(log)}",
        )
    return found


def generate(
    log: Log, specs: Sequence[Mapping[str, object]], seed: int = 0, *, start: int | None = None
) -> list[CrashState]:
    """The union of the states every spec yields, without duplicates, sorted by prefix.
    Specs are validated by the same models as a scenario's ``crash.states``
    (``harness/config/states.py``). ``start``: the entry states begin after (default: the
    ``crashlab:mkfs`` mark).

    :raise InputError: a spec has an unknown kind, an unknown key or a bad value, or the
        log has no ``crashlab:mkfs`` mark and no ``start`` was given.
    """
    out: dict[str, CrashState] = {}
    for n, raw in enumerate(specs, 1):
        spec = parse_state(f"crash-state spec #{n}", raw)
        for s in _GENERATORS[spec.kind](log, spec, seed, start):
            out.setdefault(s.id, s)
    return sorted(out.values(), key=lambda s: (s.prefix, s.first_divergent, s.id))


def spread(states: list[CrashState], most: int) -> list[CrashState]:
    """At most ``most`` states, spread evenly along the log (deterministic)."""
    if len(states) <= most:
        return states
    if most == 1:
        return [states[-1]]
    step = (len(states) - 1) / (most - 1)
    return [states[round(i * step)] for i in range(most)]
