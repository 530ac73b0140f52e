"""Crash states across a set of disks, each recorded by its own dm-log-writes log.

A pool of N vdevs is recorded as N logs. At each sync point the workload places the same
mark text in every log, right after ``zpool sync`` returned: every write of that txg, on
every disk, precedes the mark in its log. The marks common to all logs (same texts, same
order, starting at ``crashlab:mkfs``) are therefore moments the disk set was quiescent.

A multi-disk state is one prefix ("cut") per log. Two crash models:

* ``consistent``: every log cut just after the same common mark -- power lost at once,
  everywhere, while the pool was idle.
* ``torn-across``: between two consecutive common marks A and B, each disk's cut is an
  independent entry boundary in its own (A, B] interval -- disks that lost power at
  slightly different moments, or whose caches drained unequally. By default the
  candidate cuts are the disk's FLUSH/FUA points (plus the two marks), where the disk's
  own durability model says its contents are settled; ``points = "entry"`` allows every
  entry boundary. What must survive is what mark A requires.

Which torn-across sets are power cuts (``crash.torn_model``, default ``honest``)
------------------------------------------------------------------------------------

Independent cuts can describe a disk set no power cut produces. A set is *honest* iff
there is one moment t at which power was lost such that every disk holds everything it
had acknowledged flushing before t (and nothing issued after t). Its cut may stop
anywhere after its last completed FLUSH: the unflushed tail is what its cache lost.
Anything else is a disk that *lost acknowledged writes* (lies about FLUSH, or drops its
cache): a fault model of its own, whose findings are not ZFS bugs unless more disks
than the parity misbehave. ``any`` keeps those sets and labels them ``lying-disk``.

The logs carry no cross-disk clock, so a set's honesty is only decidable through the
happens-before edges we know of:

1. the common marks (every entry before mark A on every disk precedes every entry after
   it: cuts at or past A already include everything A requires);
2. ZFS's commit protocol (``vdev_config_sync``): a txg's data goes to every disk, then
   every dirty top-level vdev is flushed and *all* flushes are waited for; only then are
   the labels/uberblocks written (even labels L0/L2, flush all, uberblocks, flush all,
   odd labels L1/L3, flush all -- each stage waits for every disk before the next). A
   label/uberblock write on disk A is therefore issued after every disk completed the
   flush that closed the previous stage. If A's cut holds that write, t lies after those
   flushes, so every disk's cut must hold its own.

Labels are recognised by place, not content: ZFS writes nothing else into the first
and last 512 KiB of a vdev (L0/L1 at 0 and 256 KiB, L2/L3 in the last 512 KiB of the
vdev's size rounded down to 256 KiB; the uberblock ring is 128..256 KiB of each label).

How that reads in a dm-log-writes log: the target logs a FLUSH when it completes,
preceded by every plain write that had completed when the flush was submitted; FUA
writes are logged on completion. So the writes of one stage appear together in one
*flush epoch* (the entries after one FLUSH up to and including the next). Per disk and
interval (A, B], the *label runs* are the epochs that contain a label-region write;
run k has its first label write ``w[k]`` and its *barrier* ``f[k]``: the last FLUSH
before ``w[k]`` (the flush every disk completed before any disk started stage k).

The rule: let K be the most label runs any disk's cut has entered (cut > ``w[k]``).
The set is honest iff K = 0, or every disk's cut holds its own barrier ``f[K]``. Runs
are matched across disks by their ordinal in the interval, which is right when every
disk takes part in every stage: true for the pools this lab builds (one top-level
vdev, mirror/raidz/draid: every txg flushes and writes uberblocks to all its leaves;
config-dirty txgs write labels to all of them; ZFS picks up to 3 top-level vdevs for
uberblocks, so pools with more would break it). If the disks of an interval disagree
on the number of runs, no match is justified and every set with K >= 1 in it is
classified ``lying-disk`` (conservative: the honest model must not vouch for a set it
cannot justify; a warning says so).

This is the engineer's first proposal ("past the first label write => every disk past
its last FLUSH before its label write") applied to *every* label run, not only the
first: with two txgs between marks, disk A holding txg T+1's uberblock while B lacks
the data B flushed for T+1 passes the first-run test and is still a lying disk.

What the rule does not see, and why that is acceptable:

* the barrier after the *last* run (the next txg's data on A, issued after B's
  post-uberblock flush, with B's uberblock still in cache): such a set is rejected by no
  rule here, but its data past the last uberblock is unreferenced, so ZFS sees exactly
  the honest set where A stopped at its last run;
* ZIL writes (their own flushes and fsync ordering are not modelled; our oracle checks
  only what the common marks require). A ZIL flush logged between B's pre-label flush
  and B's label write becomes B's barrier: stricter than needed, so a set may be
  dropped, never wrongly vouched for; a ZIL flush splitting one stage's label writes
  into two epochs makes the run counts disagree (same, conservative).

Ids do not depend on the model: a set has one id whichever model found it. ``honest``
draws the same seeded sequence as ``any`` and skips the dishonest draws, so before the
``max_states`` cap it keeps every honest set ``any`` would have drawn.

Within one disk a cut is a plain prefix: reordering inside a disk's cache is the
single-log generators' business (faults/crashstates.py); this module adds the
dimension they cannot: disks disagreeing with each other.

Ids are content addresses, as for single-log states: the hash of every log's hash and
every cut, so the same set of cuts found by two generators is one state.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError
from harness.record.logwrites import DISCARD, FLUSH, FUA, MARK, Log
from harness.replay.crashstates import MKFS_MARK, CrashState, state_id

log = logging.getLogger("crashlab.multicrash")

MARK_PREFIX = "crashlab:"
POINTS = ("flush", "entry")
TORN_MODELS = ("honest", "any")
LYING = "lying-disk"
# ZFS's on-disk label geometry (vdev_impl.h): 4 labels of 256 KiB, two at each end of the
# vdev, whose usable size is rounded down to a whole label.
VDEV_LABEL = 256 << 10
LABEL_BYTES = 2 * VDEV_LABEL


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def multi_state_id(log_hashes: Sequence[str], cuts: Sequence[int]) -> str:
    """The id of the disk set whose disk k holds log k's first ``cuts[k]`` entries."""
    if len(log_hashes) != len(cuts):
        raise ValueError("one cut per log")
    key = {"logs": list(log_hashes), "cuts": list(cuts)}
    return hashlib.sha256(_canonical(key).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class MultiState:
    id: str
    log_hashes: tuple[str, ...]
    cuts: tuple[int, ...]  # prefix length per disk
    mark: str  # the last common mark every disk has passed: what must have survived
    generator: str  # "consistent" or "torn-across"
    params: str = "{}"
    seed: int = 0
    # False: no power cut of honest disks yields this set (see the module docstring);
    # a finding in it is a disk losing acknowledged writes, not a filesystem bug.
    honest: bool = True

    @property
    def consistent(self) -> bool:
        return self.generator == "consistent"

    @property
    def model(self) -> str:
        """``honest`` or ``lying-disk``."""
        return "honest" if self.honest else LYING

    def disk_state(self, k: int) -> CrashState:
        """Disk k's image as a single-log crash state (for harness.replay)."""
        h, p = self.log_hashes[k], self.cuts[k]
        return CrashState(state_id(h, p, (), None, ()), h, p, mark=self.mark, generator="multi")

    def describe(self) -> str:
        cuts = ", ".join(f"d{k}@{c}" for k, c in enumerate(self.cuts))
        model = "" if self.honest else f" [{LYING}: a disk lost acknowledged writes]"
        return f"{self.id}: {self.generator}{model} after {self.mark!r}: cuts {cuts}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "log_hashes": list(self.log_hashes),
            "cuts": list(self.cuts),
            "mark": self.mark,
            "generator": self.generator,
            "params": json.loads(self.params),
            "seed": self.seed,
            "honest": self.honest,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MultiState:
        """:raise InputError: malformed, or the id does not match the content."""
        try:
            s = cls(
                id=str(d["id"]),
                log_hashes=tuple(str(h) for h in d["log_hashes"]),
                cuts=tuple(int(c) for c in d["cuts"]),
                mark=str(d["mark"]),
                generator=str(d["generator"]),
                params=_canonical(d["params"]),
                seed=int(d["seed"]),
                # Records from before the classification vouch for nothing but
                # consistent cuts.
                honest=bool(d.get("honest", d["generator"] == "consistent")),
            )
            want = multi_state_id(s.log_hashes, s.cuts)
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"malformed multi-disk crash state record: {e!r}") from None
        if want != s.id:
            raise InputError(
                f"multi-disk crash state {s.id} does not match its content (hashes to {want})"
            )
        return s


def common_marks(logs: Sequence[Log]) -> list[tuple[str, tuple[int, ...]]]:
    """The crashlab marks every log has, in log order, with their entry index per log,
    from ``crashlab:mkfs`` on.

    :raise InputError: no logs, a log without the mkfs mark, a mark twice in one log, or
        logs that disagree on the order of their common marks (then a "common mark" is
        not one moment, and no cut at it is consistent).
    """
    if not logs:
        raise InputError("a multi-disk crash state needs at least one log")
    per_log: list[dict[str, int]] = []
    for lg in logs:
        seen: dict[str, int] = {}
        for i, text in lg.marks.items():
            if not text.startswith(MARK_PREFIX):
                continue
            if text in seen:
                raise InputError(
                    f"{lg.path}: mark {text!r} appears twice (entries {seen[text]}, {i})"
                )
            seen[text] = i
        if MKFS_MARK not in seen:
            raise InputError(
                f"{lg.path}: the log has no {MKFS_MARK!r} mark",
                hint="record every vdev with the same marks (harness/zfs/crash.py)",
            )
        per_log.append(seen)
    first = per_log[0]
    shared = [t for t in sorted(first, key=first.__getitem__) if all(t in m for m in per_log)]
    for lg, m in zip(logs, per_log, strict=True):
        order = sorted(shared, key=m.__getitem__)
        if order != shared:
            raise InputError(
                f"{lg.path}: the common marks are in another order than in {logs[0].path}",
                hint="marks must be placed in every log at the same sync point",
            )
    start = shared.index(MKFS_MARK)
    return [(t, tuple(m[t] for m in per_log)) for t in shared[start:]]


def _hashes(logs: Sequence[Log]) -> tuple[str, ...]:
    return tuple(lg.hash for lg in logs)


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.sha256(_canonical([seed, *parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def consistent_cuts(logs: Sequence[Log], seed: int = 0) -> list[MultiState]:
    """Every log cut just after each common mark."""
    hashes = _hashes(logs)
    out = []
    for text, idx in common_marks(logs):
        cuts = tuple(i + 1 for i in idx)
        out.append(
            MultiState(multi_state_id(hashes, cuts), hashes, cuts, text, "consistent", "{}", seed)
        )
    return out


def cut_points(log: Log, lo: int, hi: int, points: str = "flush") -> list[int]:
    """Candidate prefixes of one log between its marks at entries ``lo`` and ``hi``:
    ``lo + 1`` (right after mark A), ``hi`` (everything before mark B) and, in between,
    just after each FLUSH/FUA entry (``points="flush"``) or every entry (``"entry"``)."""
    if points == "entry":
        inner: list[int] = list(range(lo + 2, hi))
    else:
        flags = log.flags
        inner = [i + 1 for i in range(lo + 1, hi) if flags[i] & (FLUSH | FUA)]
    return sorted({lo + 1, hi, *inner})


def label_regions(device_size: int) -> tuple[tuple[int, int], ...]:
    """Byte ranges ``[lo, hi)`` of a vdev of ``device_size`` bytes that hold ZFS labels
    and uberblocks: the first 512 KiB and, before the usable size (rounded down to
    256 KiB), the last 512 KiB -- when the vdev is large enough to have both."""
    psize = device_size - device_size % VDEV_LABEL
    if psize < 2 * LABEL_BYTES:
        return ((0, LABEL_BYTES),)
    return ((0, LABEL_BYTES), (psize - LABEL_BYTES, psize))


def label_runs(log: Log, lo: int, hi: int, device_size: int) -> list[tuple[int, int]]:
    """The label runs of one log between its marks at entries ``lo`` and ``hi``: per
    flush epoch holding a label-region write, ``(w, f)`` with ``w`` the epoch's first
    label write and ``f`` its barrier, the last FLUSH before ``w`` (``lo`` when there is
    none in the interval: every cut holds what precedes the mark)."""
    regions = label_regions(device_size)
    flags = log.flags
    runs: list[tuple[int, int]] = []
    barrier, open_epoch = lo, True
    for i in range(lo + 1, hi):
        f = flags[i]
        if f & FLUSH:
            # A flush with data flushes first, then writes: it opens the new epoch.
            barrier, open_epoch = i, True
        if not open_epoch or f & (DISCARD | MARK):
            continue
        e = log.entries[i]
        if e.is_write and any(e.offset < b and a < e.offset + e.length for a, b in regions):
            runs.append((i, barrier))
            open_epoch = False
    return runs


@dataclass(frozen=True, slots=True)
class Interval:
    """Everything between two consecutive common marks that the honest model needs."""

    mark: str  # mark A, the start
    lo: tuple[int, ...]  # mark A's entry per log
    hi: tuple[int, ...]  # mark B's entry per log
    runs: tuple[tuple[tuple[int, int], ...], ...]  # label_runs per log

    @property
    def matched(self) -> bool:
        """Whether every disk has as many label runs (then the k-th runs are one stage)."""
        return len({len(r) for r in self.runs}) <= 1

    def holds(self, cuts: Sequence[int]) -> bool:
        """Whether ``cuts`` (one per log) lie within the interval: past A, not past B."""
        return all(a < c <= b for c, a, b in zip(cuts, self.lo, self.hi, strict=True))

    def honest(self, cuts: Sequence[int]) -> bool:
        """The rule of the module docstring: if any cut entered label run K, every cut
        holds its own barrier of run K."""
        k = max(sum(1 for w, _ in r if w < c) for r, c in zip(self.runs, cuts, strict=True))
        if k == 0:
            return True
        if not self.matched:
            return False
        return all(c > r[k - 1][1] for r, c in zip(self.runs, cuts, strict=True))


def intervals(logs: Sequence[Log], device_size: int | None = None) -> list[Interval]:
    """One :class:`Interval` per pair of consecutive common marks. ``device_size``: the
    vdevs' size in bytes; by default each log's extent (zpool create writes the last
    labels, so the furthest write ends at the vdev's usable size).

    :raise InputError: as :func:`common_marks`.
    """
    marks = common_marks(logs)
    sizes = [device_size if device_size is not None else lg.extent() for lg in logs]
    out = []
    for (text, lo), (_, hi) in itertools.pairwise(marks):
        runs = tuple(
            tuple(label_runs(lg, a, b, size))
            for lg, a, b, size in zip(logs, lo, hi, sizes, strict=True)
        )
        iv = Interval(text, lo, hi, runs)
        if not iv.matched:
            log.warning(
                "after %r the disks have %s label runs: txgs cannot be matched across "
                "disks, so torn sets past a label write are classified %s",
                text,
                "/".join(str(len(r)) for r in runs),
                LYING,
            )
        out.append(iv)
    return out


def is_honest(logs: Sequence[Log], cuts: Sequence[int], device_size: int | None = None) -> bool:
    """Whether a power cut of disks that keep what they flushed can leave ``cuts``.

    :raise InputError: one cut per log is needed, and the cuts must lie between two
        consecutive common marks (a consistent cut lies just past its mark).
    """
    if len(cuts) != len(logs):
        raise InputError(f"{len(cuts)} cuts for {len(logs)} logs")
    ivs = intervals(logs, device_size)
    for iv in ivs:
        if iv.holds(cuts):
            return iv.honest(cuts)
    marks = common_marks(logs)
    if all(c == i + 1 for c, i in zip(cuts, marks[-1][1], strict=True)):
        return True  # the consistent cut at the last mark
    raise InputError(f"cuts {list(cuts)} do not lie between two consecutive common marks")


def torn_across(
    logs: Sequence[Log],
    seed: int = 0,
    per_interval: int = 8,
    max_states: int = 64,
    points: str = "flush",
    model: str = "honest",
    device_size: int | None = None,
) -> list[MultiState]:
    """Independent cuts per disk between consecutive common marks (seeded sample).

    Per interval (A, B), up to ``per_interval`` combinations, never one where every disk
    sits at A's cut or every disk at B's (those are consistent cuts); ``max_states``
    overall. Exhaustive when an interval has no more combinations than asked for. Every
    state is classified (``MultiState.honest``); ``model="honest"`` keeps only honest
    ones, ``"any"`` keeps all (the sample of before the classification existed).

    :raise InputError: ``points`` or ``model`` unknown, or counts below 1.
    """
    if points not in POINTS:
        raise InputError(f"torn-across: points must be one of {', '.join(POINTS)}, got {points!r}")
    if model not in TORN_MODELS:
        raise InputError(
            f"torn-across: model must be one of {', '.join(TORN_MODELS)}, got {model!r}"
        )
    if per_interval < 1 or max_states < 1:
        raise InputError("torn-across: per_interval and max_states must be at least 1")
    hashes = _hashes(logs)
    params = _canonical(
        {"per_interval": per_interval, "max_states": max_states, "points": points, "model": model}
    )
    only_honest = model == "honest"
    # An honest draw is rarer than any draw; the draws are the same sequence either way.
    attempts = per_interval * (200 if only_honest else 50)
    picks: list[tuple[Interval, tuple[int, ...]]] = []
    for iv in intervals(logs, device_size):
        cands = [cut_points(lg, a, b, points) for lg, a, b in zip(logs, iv.lo, iv.hi, strict=True)]
        at_a = tuple(a + 1 for a in iv.lo)
        at_b = tuple(iv.hi)
        total = 1
        for pts in cands:
            total *= len(pts)
        chosen: dict[tuple[int, ...], None] = {}
        if total - 2 <= per_interval:
            combos = itertools.product(*cands)
            chosen.update((c, None) for c in combos if not only_honest or iv.honest(c))
        else:
            rng = _rng(seed, "torn-across", iv.mark)
            for _ in range(attempts):
                if len(chosen) >= per_interval + 2:
                    break
                c = tuple(rng.choice(x) for x in cands)
                if not only_honest or iv.honest(c):
                    chosen.setdefault(c, None)
        picks += [(iv, c) for c in chosen if c not in (at_a, at_b)][:per_interval]
    if len(picks) > max_states:
        picks = _rng(seed, "torn-across-cap").sample(picks, max_states)
    states = {
        multi_state_id(hashes, c): MultiState(
            multi_state_id(hashes, c),
            hashes,
            c,
            iv.mark,
            "torn-across",
            params,
            seed,
            iv.honest(c),
        )
        for iv, c in picks
    }
    return sorted(states.values(), key=lambda s: (s.cuts, s.id))


def generate(
    logs: Sequence[Log],
    specs: Sequence[Mapping[str, object]],
    seed: int = 0,
    *,
    device_size: int | None = None,
) -> list[MultiState]:
    """The union of the states the specs yield (``{"kind": "consistent"}``,
    ``{"kind": "torn-across", "per_interval": 8, "max_states": 64, "points": "flush",
    "model": "honest"}``), without duplicates, consistent cuts first, each in log order.
    ``device_size``: the vdevs' size, for finding their last labels (see
    :func:`intervals`).

    :raise InputError: an unknown kind or key, a bad value, or logs without common marks.
    """
    out: dict[str, MultiState] = {}
    for n, spec in enumerate(specs, 1):
        kind = spec.get("kind")
        where = f"multi-disk crash-state spec #{n} (kind={kind!r})"
        allowed = {
            "consistent": set(),
            "torn-across": {"per_interval", "max_states", "points", "model"},
        }
        if not isinstance(kind, str) or kind not in allowed:
            raise InputError(f"{where}: unknown kind; valid kinds: consistent, torn-across")
        extra = sorted(set(spec) - allowed[kind] - {"kind"})
        if extra:
            raise InputError(f"{where}: unknown key(s) {', '.join(extra)}")
        if kind == "consistent":
            found = consistent_cuts(logs, seed)
        else:
            found = torn_across(
                logs,
                seed,
                _int(where, "per_interval", spec.get("per_interval", 8)),
                _int(where, "max_states", spec.get("max_states", 64)),
                str(spec.get("points", "flush")),
                str(spec.get("model", "honest")),
                device_size,
            )
        for s in found:
            out.setdefault(s.id, s)
    return sorted(out.values(), key=lambda s: (not s.consistent, s.cuts, s.id))


def _int(where: str, key: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{where}: {key} must be an integer >= 1, got {v!r}")
    return v
