"""ZFS scenarios (``kind = "zfs"``): TOML into a frozen ``ZfsScenario``, checked before boot.

Shape of the file (every key but ``description`` has a default)::

    kind = "zfs"
    description = "..."
    experiment = "resilver"        # or "scrub"
    layout = "raidz1"              # mirror | raidz1..3 | draid1..3
    disks = 4                      # data disks; spares for a resilver are added on top
    disk_size = "256M"
    fill = 75                      # percent of usable capacity, (0, 95]
    repeat = 1                     # fresh guest each time
    ashift = 12
    recordsize = "128K"
    cache = false                  # an extra disk as L2ARC
    log = false                    # an extra disk as SLOG
    [fault]                        # faults/disk.py
    kind = "wipe"                  # zero | zero-percent | bitflip | wipe | detach
    disks = [1]
    when = "running"               # or "offline": pool exported, guest stopped, re-imported
    [sweep]                        # optional: the cross product, each cell ``repeat`` times
    fill = [25, 50, 75]
    layout = ["mirror", "raidz1"]

``experiment = "crash"`` (multi-disk crash states, harness/zfs/crash.py) takes no
``[fault]``, ``fill`` or ``[sweep]``; instead::

    [crash]
    rounds = 4                     # workload rounds, each ended by zpool sync + marks
    files = 12                     # file names the workload draws from
    max_size = "256K"              # largest write
    ops = 6                        # operations per round
    consistent = true              # every log cut at each common mark
    torn_per_interval = 4          # independent cuts per disk between two marks (0: none)
    torn_max_states = 32
    points = "flush"               # torn cuts at FLUSH/FUA points, or "entry": anywhere
    torn_model = "honest"          # only torn sets a power cut can leave, or "any": also
                                   # disks losing acknowledged writes (never findings)
    guest_batch = 4                # disk sets checked per guest

``--set`` takes the top-level keys by name (``layout=raidz2``, ``fill=50``), ``fault`` for
the fault's kind, and dotted keys for the rest (``fault.percent=25``, ``sweep.fill=[25]``).
"""

from __future__ import annotations

import difflib
import itertools
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from faults.disk import LABEL_BYTES, DiskFault, FaultKind, When
from harness.config.tables import Table, parse_size
from harness.errors import InputError
from harness.replay.multicrash import TORN_MODELS

MiB = 1 << 20
# ZFS refuses vdevs under 64 MiB; the labels and metaslabs want some room besides.
MIN_DISK = 64 * MiB
MAX_FILL = 95.0
DEFAULT_TIMEOUT = 1800.0


class Experiment(StrEnum):
    SCRUB = "scrub"
    RESILVER = "resilver"
    CRASH = "crash"


class Layout(StrEnum):
    MIRROR = "mirror"
    RAIDZ1 = "raidz1"
    RAIDZ2 = "raidz2"
    RAIDZ3 = "raidz3"
    DRAID1 = "draid1"
    DRAID2 = "draid2"
    DRAID3 = "draid3"

    @property
    def parity(self) -> int:
        """How many disks the layout can lose (for a mirror: all but one, set per pool)."""
        return 0 if self is Layout.MIRROR else int(self.value[-1])

    def min_disks(self) -> int:
        return 2 if self is Layout.MIRROR else self.parity + 1

    def redundancy(self, disks: int) -> int:
        return disks - 1 if self is Layout.MIRROR else self.parity


# What ``--set`` understands: key -> how the command-line string becomes a TOML value.
SETTABLE: dict[str, str] = {
    "description": "str",
    "seed": "int",
    "experiment": "str",
    "layout": "str",
    "disks": "int",
    "disk_size": "str",
    "fill": "float",
    "repeat": "int",
    "ashift": "int",
    "recordsize": "str",
    "cache": "bool",
    "log": "bool",
    "timeout": "float",
    "memory_mb": "int",
    "fault.kind": "str",
    "fault.disks": "toml",
    "fault.when": "str",
    "fault.offset": "str",
    "fault.length": "str",
    "fault.percent": "float",
    "fault.labels": "bool",
    "fault.count": "int",
    "sweep.fill": "toml",
    "sweep.layout": "toml",
    "crash.rounds": "int",
    "crash.files": "int",
    "crash.max_size": "str",
    "crash.ops": "int",
    "crash.consistent": "bool",
    "crash.torn_per_interval": "int",
    "crash.torn_max_states": "int",
    "crash.points": "str",
    "crash.torn_model": "str",
    "crash.guest_batch": "int",
}
_ALIASES = {"fault": "fault.kind"}
SWEEP_KEYS = ("fill", "layout")


@dataclass(frozen=True)
class PoolSpec:
    layout: Layout
    disks: int
    disk_size: int
    ashift: int
    recordsize: int
    cache: bool
    log: bool


@dataclass(frozen=True)
class CrashSpec:
    """The workload and the crash states of a ``crash`` experiment."""

    rounds: int = 4
    files: int = 12
    max_size: int = 256 * 1024
    ops: int = 6
    consistent: bool = True
    torn_per_interval: int = 4
    torn_max_states: int = 32
    points: str = "flush"
    torn_model: str = "honest"  # faults.multicrash.TORN_MODELS
    guest_batch: int = 4

    def state_specs(self) -> list[dict[str, object]]:
        """For faults.multicrash.generate."""
        specs: list[dict[str, object]] = []
        if self.consistent:
            specs.append({"kind": "consistent"})
        if self.torn_per_interval:
            specs.append(
                {
                    "kind": "torn-across",
                    "per_interval": self.torn_per_interval,
                    "max_states": self.torn_max_states,
                    "points": self.points,
                    "model": self.torn_model,
                }
            )
        return specs

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "files": self.files,
            "max_size": self.max_size,
            "ops": self.ops,
            "consistent": self.consistent,
            "torn_per_interval": self.torn_per_interval,
            "torn_max_states": self.torn_max_states,
            "points": self.points,
            "torn_model": self.torn_model,
            "guest_batch": self.guest_batch,
        }


@dataclass(frozen=True)
class Cell:
    """One point of the experiment: what a repetition runs."""

    pool: PoolSpec
    fill: float

    def label(self) -> str:
        return f"{self.pool.layout} x{self.pool.disks} fill {self.fill:g}%"


@dataclass(frozen=True)
class ZfsScenario:
    name: str
    path: Path
    description: str
    experiment: Experiment
    seed: int
    pool: PoolSpec
    fill: float
    fault: DiskFault
    repeat: int
    timeout: float
    memory_mb: int
    sweep: Mapping[str, tuple[Any, ...]]
    extends: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    kind: str = "zfs"
    crash: CrashSpec | None = None  # set for experiment = "crash"

    def cells(self) -> Iterator[Cell]:
        """The sweep's cross product (one cell without a sweep), fill varying fastest."""
        layouts = self.sweep.get("layout") or (self.pool.layout,)
        fills = self.sweep.get("fill") or (self.fill,)
        for layout, fill in itertools.product(layouts, fills):
            yield Cell(replace(self.pool, layout=Layout(layout)), float(fill))

    @property
    def experiment_kind(self) -> str:
        """The experiment kind that runs this scenario (harness/experiments/zfs/)."""
        return "zfs-crash" if self.experiment is Experiment.CRASH else "zfs-scan"

    def resolved(self) -> dict[str, Any]:
        p = self.pool
        return {
            "name": self.name,
            "path": str(self.path),
            "extends": list(self.extends),
            "overrides": list(self.overrides),
            "description": self.description,
            "kind": self.kind,
            "seed": self.seed,
            "experiment": str(self.experiment),
            "layout": str(p.layout),
            "disks": p.disks,
            "disk_size": p.disk_size,
            "fill": self.fill,
            "repeat": self.repeat,
            "ashift": p.ashift,
            "recordsize": p.recordsize,
            "cache": p.cache,
            "log": p.log,
            "timeout": self.timeout,
            "memory_mb": self.memory_mb,
            "fault": self.fault.to_json(),
            "sweep": {k: list(v) for k, v in self.sweep.items()},
            **({"crash": self.crash.to_json()} if self.crash is not None else {}),
        }


# --- overrides ----------------------------------------------------------------------


def parse_overrides(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in overrides:
        key, eq, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        where = f"{path}: --set {item}"
        if not eq or not key:
            raise InputError(f"{where}: expected KEY=VALUE", hint="e.g. --set layout=raidz2")
        key = _ALIASES.get(key, key)
        if key not in SETTABLE:
            close = difflib.get_close_matches(key, [*SETTABLE, *_ALIASES], 1)
            raise InputError(
                f"{where}: unknown key {key!r}",
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + "valid keys: "
                + ", ".join(SETTABLE),
            )
        value = _typed(where, SETTABLE[key], raw)
        *tables, leaf = key.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[leaf] = value
    return out


def _typed(where: str, kind: str, raw: str) -> Any:
    if kind == "str":
        return raw
    try:
        if kind == "int":
            return int(raw, 0)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise InputError(f"{where}: expected a number") from None
    if kind == "bool":
        b = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if raw.lower() not in b:
            raise InputError(f"{where}: expected true or false")
        return b[raw.lower()]
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{where}: not a TOML value: {e}", hint="e.g. [25, 50, 75]") from None


# --- validation ---------------------------------------------------------------------


def _values(enum: type[StrEnum]) -> list[str]:
    return [m.value for m in enum]


def build(
    path: Path, data: Mapping[str, Any], chain: tuple[str, ...], overrides: tuple[str, ...]
) -> ZfsScenario:
    """Validate merged scenario data; every problem is an InputError naming key and value."""
    t = Table(path, dict(data), prefix="")
    name = t.get("name", str, path.stem)
    if name != path.stem:
        raise t.error("name", name, f"must match the file name {path.stem!r}")
    description = t.get("description", str, required=True).strip()
    t.choice("kind", ["zfs"])
    seed = t.get("seed", int, 1)
    experiment = Experiment(t.choice("experiment", _values(Experiment), Experiment.RESILVER))
    layout = Layout(t.choice("layout", _values(Layout), Layout.RAIDZ1))
    disks = t.get("disks", int, 4)
    disk_size = t.convert("disk_size", parse_size, "256M")
    fill = t.get("fill", float, 50.0)
    repeat = t.get("repeat", int, 1)
    ashift = t.get("ashift", int, 12)
    recordsize = t.convert("recordsize", parse_size, "128K")
    cache = t.get("cache", bool, False)
    log = t.get("log", bool, False)
    timeout = t.get("timeout", float, DEFAULT_TIMEOUT)
    memory_mb = t.get("memory_mb", int, 1024)
    _check_fill(t, "fill", fill)
    if repeat < 1:
        raise t.error("repeat", repeat, "must be at least 1")
    if disk_size < MIN_DISK:
        raise t.error("disk_size", t.data.get("disk_size"), "ZFS needs disks of 64 MiB or more")
    if not 9 <= ashift <= 16:
        raise t.error("ashift", ashift, "must be from 9 (512 B) to 16 (64 KiB)")
    if recordsize & (recordsize - 1) or not 512 <= recordsize <= 16 * MiB:
        raise t.error("recordsize", t.data.get("recordsize"), "must be a power of 2, 512B..16M")
    if timeout <= 0 or memory_mb < 512:
        raise t.error("timeout" if timeout <= 0 else "memory_mb", timeout, "too small")
    sweep = _sweep(t.table("sweep"))
    for lay in sweep.get("layout") or (layout,):
        _check_layout(t, Layout(lay), disks)
    pool = PoolSpec(layout, disks, disk_size, ashift, recordsize, cache, log)
    crash: CrashSpec | None = None
    if experiment is Experiment.CRASH:
        for key in ("fault", "sweep", "fill", "cache", "log"):
            if t.has(key):
                raise t.error(key, t.data[key], "a crash experiment takes no " + key)
        # The default fault is never applied; it only keeps the record's shape.
        fault = DiskFault(FaultKind.ZERO_PERCENT, (0,), When.RUNNING, seed=seed)
        crash = _crash(t.table("crash"))
    else:
        if t.has("crash"):
            raise t.error("crash", t.data["crash"], "only experiment = 'crash' takes [crash]")
        fault = _fault(t.table("fault"), disks, disk_size, experiment, seed)
    t.finish()
    return ZfsScenario(
        name,
        path,
        description,
        experiment,
        seed,
        pool,
        fill,
        fault,
        repeat,
        timeout,
        memory_mb,
        sweep,
        chain,
        overrides,
        crash=crash,
    )


def _crash(t: Table) -> CrashSpec:
    d = CrashSpec()
    c = CrashSpec(
        rounds=t.get("rounds", int, d.rounds),
        files=t.get("files", int, d.files),
        max_size=t.convert("max_size", parse_size, d.max_size),
        ops=t.get("ops", int, d.ops),
        consistent=t.get("consistent", bool, d.consistent),
        torn_per_interval=t.get("torn_per_interval", int, d.torn_per_interval),
        torn_max_states=t.get("torn_max_states", int, d.torn_max_states),
        points=t.choice("points", ["flush", "entry"], d.points),
        torn_model=t.choice("torn_model", list(TORN_MODELS), d.torn_model),
        guest_batch=t.get("guest_batch", int, d.guest_batch),
    )
    for key in ("rounds", "files", "ops", "torn_max_states", "guest_batch"):
        if getattr(c, key) < 1:
            raise t.error(key, getattr(c, key), "must be at least 1")
    if c.torn_per_interval < 0:
        raise t.error("torn_per_interval", c.torn_per_interval, "must be 0 (none) or more")
    if not 512 <= c.max_size <= 64 * MiB:
        raise t.error("max_size", t.data.get("max_size"), "must be from 512B to 64M")
    if not c.consistent and not c.torn_per_interval:
        raise t.error("consistent", False, "no crash states: set torn_per_interval > 0")
    t.finish()
    return c


def _check_fill(t: Table, key: str, fill: Any) -> None:
    if isinstance(fill, bool) or not isinstance(fill, int | float) or not 0 < fill <= MAX_FILL:
        raise t.error(
            key,
            fill,
            f"fill is a percentage of usable capacity in (0, {MAX_FILL:g}]",
            hint="ZFS keeps ~3% slop space and slows down badly when nearly full",
        )


def _check_layout(t: Table, layout: Layout, disks: int) -> None:
    if disks < layout.min_disks():
        raise t.error(
            "disks",
            disks,
            f"{layout} needs at least {layout.min_disks()} disks",
            hint=f"set disks = {layout.min_disks()} or more",
        )


def _sweep(t: Table) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    fills = t.get("fill", list, [])
    for f in fills:
        _check_fill(t, "fill", f)
    if fills:
        out["fill"] = tuple(float(f) for f in fills)
    layouts = t.get("layout", list, [])
    for lay in layouts:
        if lay not in _values(Layout):
            raise t.error("layout", layouts, f"{lay!r} is not one of " + ", ".join(Layout))
    if layouts:
        out["layout"] = tuple(layouts)
    t.finish()
    return out


def _fault(t: Table, disks: int, disk_size: int, experiment: Experiment, seed: int) -> DiskFault:
    default = FaultKind.WIPE if experiment is Experiment.RESILVER else FaultKind.ZERO_PERCENT
    kind = FaultKind(t.choice("kind", _values(FaultKind), default))
    if experiment is Experiment.RESILVER and kind not in (FaultKind.WIPE, FaultKind.DETACH):
        raise t.error(
            "kind", str(kind), "a resilver needs a lost disk", hint="use kind = 'wipe' or 'detach'"
        )
    if experiment is Experiment.SCRUB and kind in (FaultKind.WIPE, FaultKind.DETACH):
        raise t.error(
            "kind",
            str(kind),
            "a scrub experiment damages data in place",
            hint="use experiment = 'resilver' to lose a disk",
        )
    which = t.get("disks", list, [0])
    if not which or not all(isinstance(i, int) and 0 <= i < disks for i in which):
        raise t.error("disks", which, f"expected disk indexes from 0 to {disks - 1}")
    if len(set(which)) != len(which):
        raise t.error("disks", which, "a disk is listed twice")
    when = When(t.choice("when", _values(When), When.RUNNING))
    offset = t.convert("offset", _size_or_zero, 0)
    length = t.convert("length", _size_or_zero, 0)
    percent = t.get("percent", float, 50.0)
    labels = t.get("labels", bool, False)
    count = t.get("count", int, 1000)
    if kind is FaultKind.ZERO and (length <= 0 or offset + length > disk_size):
        raise t.error("length", length, f"the range must be non-empty and within {disk_size} B")
    if (
        kind is FaultKind.ZERO
        and not labels
        and (offset < LABEL_BYTES or offset + length > disk_size - LABEL_BYTES)
    ):
        raise t.error(
            "offset",
            offset,
            "the range overlaps the ZFS labels (first and last 512 KiB)",
            hint="set labels = true to allow it",
        )
    if kind is FaultKind.ZERO_PERCENT and not 0 < percent <= 100:
        raise t.error("percent", percent, "must be in (0, 100]")
    if kind is FaultKind.BITFLIP and count < 1:
        raise t.error("count", count, "must be at least 1")
    t.finish()
    return DiskFault(kind, tuple(which), when, offset, length, percent, labels, count, seed)


def _size_or_zero(v: Any) -> int:
    return 0 if v in (0, "0") else parse_size(v)
