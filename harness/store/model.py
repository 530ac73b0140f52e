"""The store's records: what a run, a log, a crash state and a check are when they cross
into or out of SQLite, and the small helpers every reader and writer shares."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from harness.config.settings import canonical_json as canonical_json  # shared with config
from harness.outcome import Account, Outcome

# "CRLB" as a big-endian int: `file(1)` and `sqlite3 .dbinfo` show it, and it tells
# our files from any other SQLite file without looking at table names.
APPLICATION_ID = 0x43524C42
# A check's output is kept as an excerpt: the full log lives next to the run; the store
# only needs enough to recognise the failure.
OUTPUT_EXCERPT = 4000


class RunKind(StrEnum):
    CRASH = "crash"
    ZFS = "zfs"
    FAULTS = "faults"
    RECOVERY = "recovery"
    WORKLOAD = "workload"


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class Accelerator(StrEnum):
    KVM = "kvm"
    TCG = "tcg"


class Stage(StrEnum):
    HOST = "host"
    GUEST = "guest"


class Phase(StrEnum):
    JOURNAL_REPLAY = "journal_replay"
    LOG_REPLAY = "log_replay"  # guest: the fs tool's log replay before a mount (JFS)
    FSCK = "fsck"
    MOUNT = "mount"
    UMOUNT = "umount"
    FSCK_AFTER = "fsck_after"
    REPAIR = "repair"  # host: e2fsck -fy / xfs_repair / btrfs check --repair on a copy
    GUEST_REPAIR = "guest_repair"  # the same in the guest, after the kernel's own recovery


class ScanKind(StrEnum):
    SCRUB = "scrub"
    RESILVER = "resilver"


# --- schema: harness/schema.py -------------------------------------------------------

# --- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEnv:
    """Where a run ran; enough to tell whether two runs are comparable."""

    host: str = field(default_factory=socket.gethostname)
    accelerator: Accelerator | None = None
    guest_kernel: str | None = None
    qemu_version: str | None = None
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    image_hash: str | None = None


@dataclass(frozen=True)
class LogInfo:
    """A dm-log-writes log, named by the hash of its contents."""

    hash: str
    path: str
    entries: int
    flushes: int
    fuas: int
    marks: int
    discards: int
    bytes: int


@dataclass(frozen=True)
class CrashState:
    id: str
    log_hash: str
    generator: str
    prefix: int
    params: Mapping[str, Any] = field(default_factory=dict)
    last_mark: str | None = None
    description: str = ""
    identity: str | None = None  # the image's content identity (replayer.Identity)
    check_key: str | None = None  # what else its verdict depends on (crashstate/reuse.py)
    reused_from: str | None = None  # "run_id/state_id" whose verdict it took
    parent: str | None = None  # a recovery crash: the state whose recovery it cut


@dataclass(frozen=True)
class Judged:
    """A state judged earlier with the same check key and image: whose verdict a twin
    takes (``Store.judged``)."""

    run_id: str
    state_id: str
    verdict: Outcome
    checks: Sequence[CheckRow]
    promise: Promise | None = None  # its profile and what it broke (schema 10)

    @property
    def ref(self) -> str:
        return f"{self.run_id}/{self.state_id}"


@dataclass(frozen=True)
class Promise:
    """What a state was judged by and what its finding broke (schema 10; see
    harness/check/promises.py): the oracle's guarantee profile, the weakest promise a
    failed requirement broke (None: no finding, or none of the oracle's) and the rule."""

    profile: str | None
    broken: str | None = None
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "broken": self.broken, "rule": self.rule}


@dataclass(frozen=True)
class CheckResult:
    stage: Stage
    checker: str
    outcome: Outcome
    seconds: float
    exit_status: int | None = None
    output: str = ""


@dataclass(frozen=True)
class RunRow:
    id: str
    scenario: str
    kind: str
    params: Mapping[str, Any]
    seed: int | None
    started_at: str
    finished_at: str | None
    status: RunStatus
    host: str | None
    accelerator: str | None
    guest_kernel: str | None
    qemu_version: str | None
    tool_versions: Mapping[str, str]
    image_hash: str | None
    fs: str | None
    summary: Mapping[str, Any] | None
    # The run's account (harness/outcome.py): what every report and campaign reads.
    account: Account
    exit_status: int | None  # None: still running, or stored before the account existed

    @property
    def outcome_counts(self) -> Mapping[str, int]:
        """The outcomes that can be findings (the kind's expected ones are apart)."""
        return self.account.counts

    @property
    def exit(self) -> int:
        """The run's exit status as stored, else its account's (a run stored before
        accounts were, whose status the lifecycle never wrote)."""
        return self.account.status if self.exit_status is None else self.exit_status

    @property
    def duration(self) -> float | None:
        """Seconds from start to finish; ``None`` while running or if never finished."""
        if self.finished_at is None:
            return None
        start = datetime.fromisoformat(self.started_at)
        return (datetime.fromisoformat(self.finished_at) - start).total_seconds()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scenario": self.scenario,
            "kind": self.kind,
            "fs": self.fs,
            "params": dict(self.params),
            "seed": self.seed,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_seconds": self.duration,
            "status": str(self.status),
            "host": self.host,
            "accelerator": self.accelerator,
            "guest_kernel": self.guest_kernel,
            "qemu_version": self.qemu_version,
            "tool_versions": dict(self.tool_versions),
            "image_hash": self.image_hash,
            "summary": self.summary,
            "outcome_counts": dict(self.outcome_counts),
            "expected_outcomes": dict(self.account.expected),
            # the account's one rule (harness/outcome.py): what the dashboard counts too
            "findings": self.account.findings,
            "exit_status": self.exit_status,
        }


@dataclass(frozen=True)
class ItemOutcome:
    """One item of a run as every kind stores it (``v_item_outcomes``): its id, its
    outcome, and the item's own stored facts its kind's counting rule may read (a crash
    state's parameters, an observation's metrics, a scan's expected loss)."""

    item: str
    outcome: Outcome
    detail: Mapping[str, Any]
    source: str  # verdicts | observations | zfs_scans


@dataclass(frozen=True)
class CheckRow:
    stage: str
    checker: str
    outcome: str
    exit_status: int | None
    seconds: float
    output: str


@dataclass(frozen=True)
class StateRow:
    id: str
    generator: str
    prefix: int
    last_mark: str | None
    description: str
    outcome: str | None  # None: recorded but not (yet) checked
    checks: Sequence[CheckRow]
    parent: str | None = None  # a recovery crash: the state whose recovery it cut
    promise: Promise | None = None  # None: stored before schema 10, or no oracle judged it

    def to_json(self) -> dict[str, Any]:
        return {
            "promise": self.promise.to_json() if self.promise else None,
            "id": self.id,
            "generator": self.generator,
            "prefix": self.prefix,
            "last_mark": self.last_mark,
            "description": self.description,
            "outcome": self.outcome,
            "checks": [c.__dict__.copy() for c in self.checks],
            "parent": self.parent,
        }


@dataclass(frozen=True)
class PhaseStats:
    phase: str
    n: int
    mean: float
    stdev: float  # sample standard deviation (n - 1); 0 for a single value
    min: float
    p50: float
    p95: float
    max: float


@dataclass(frozen=True)
class RunDetail:
    run: RunRow
    states: Sequence[StateRow]
    recovery: Sequence[PhaseStats]
    items: Sequence[Mapping[str, Any]] = ()  # observations (kinds without a table)
    # crash states: generated, distinct, checked, reused (``StoreReads.reuse_counts``)
    reuse: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "reuse": dict(self.reuse),
            "outcome_counts": dict(self.run.outcome_counts),
            "recovery": [s.__dict__.copy() for s in self.recovery],
            "states": [s.to_json() for s in self.states],
            "items": [dict(i) for i in self.items],
        }


# --- helpers ------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def excerpt(text: str, limit: int = OUTPUT_EXCERPT) -> str:
    """Head and tail of ``text``: fsck names the problem first and sums up last."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters cut …]\n{text[-half:]}"


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); needs ≥1 value."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _opt_str(v: StrEnum | None) -> str | None:
    return None if v is None else str(v)


def _ordered_counts(pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Counts keyed by outcome, worst last, so every report lists them the same way."""
    counts = dict(pairs)

    def rank(name: str) -> int:
        try:
            return Outcome(name).severity
        except ValueError:
            return 1_000

    return {k: counts[k] for k in sorted(counts, key=rank)}


def _stats(phase: str, values: Sequence[float]) -> PhaseStats:
    return phase_stats(phase, values)


def phase_stats(phase: str, sorted_values: Sequence[float]) -> PhaseStats:
    """n, mean, stdev, min, p50, p95, max of ``sorted_values`` (at least one value)."""
    n = len(sorted_values)
    mean = sum(sorted_values) / n
    # Two passes in plain floats: statistics.stdev is exact but ~50x slower (Fractions),
    # and a table over 100,000 states must stay well under a second.
    var = sum((x - mean) ** 2 for x in sorted_values) / (n - 1) if n > 1 else 0.0
    return PhaseStats(
        phase=phase,
        n=n,
        mean=mean,
        stdev=math.sqrt(var),
        min=sorted_values[0],
        p50=percentile(sorted_values, 0.50),
        p95=percentile(sorted_values, 0.95),
        max=sorted_values[-1],
    )
