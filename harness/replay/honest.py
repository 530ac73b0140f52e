"""The honest model: which torn-across disk sets a power cut can leave.

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
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from harness.record.logwrites import DISCARD, FLUSH, MARK, Log

log = logging.getLogger("crashlab.multicrash")

LYING = "lying-disk"
# ZFS's on-disk label geometry (vdev_impl.h): 4 labels of 256 KiB, two at each end of the
# vdev, whose usable size is rounded down to a whole label.
VDEV_LABEL = 256 << 10
LABEL_BYTES = 2 * VDEV_LABEL


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


def intervals(
    logs: Sequence[Log],
    marks: Sequence[tuple[str, tuple[int, ...]]],
    device_size: int | None = None,
) -> list[Interval]:
    """One :class:`Interval` per pair of consecutive common ``marks`` (from
    ``multicrash.common_marks``). ``device_size``: the vdevs' size in bytes; by default
    each log's extent (zpool create writes the last labels, so the furthest write ends at
    the vdev's usable size).
    """
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
