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

Which torn-across sets are power cuts (``crash.torn_model``, default ``honest``) is
the honest model's business: see ``harness/replay/honest.py``.

Ids do not depend on the model: a set has one id whichever model found it. ``honest``
draws the same seeded sequence as ``any`` and skips the dishonest draws, so before the
``max_states`` cap it keeps every honest set ``any`` would have drawn.

Within one disk a cut is a plain prefix: reordering inside a disk's cache is the
single-log generators' business (harness/replay/crashstates.py); this module adds the
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
from harness.record.logwrites import FLUSH, FUA, Log
from harness.replay.crashstates import MKFS_MARK, CrashState, state_id
from harness.replay.honest import LYING as LYING  # the label, for the experiment's notes
from harness.replay.honest import Interval, intervals

log = logging.getLogger("crashlab.multicrash")

MARK_PREFIX = "crashlab:"
POINTS = ("flush", "entry")
TORN_MODELS = ("honest", "any")


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
                hint="record every vdev with the same marks (harness/experiments/zfs/record.py)",
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


def is_honest(logs: Sequence[Log], cuts: Sequence[int], device_size: int | None = None) -> bool:
    """Whether a power cut of disks that keep what they flushed can leave ``cuts``.

    :raise InputError: one cut per log is needed, and the cuts must lie between two
        consecutive common marks (a consistent cut lies just past its mark).
    """
    if len(cuts) != len(logs):
        raise InputError(f"{len(cuts)} cuts for {len(logs)} logs")
    ivs = intervals(logs, common_marks(logs), device_size)
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
    for iv in intervals(logs, common_marks(logs), device_size):
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
