"""Scenarios: TOML files in ``scenarios/`` validated into frozen dataclasses.

A scenario names the file system and how it is made and mounted, the workload, which
crash states to generate from the write log, how to check them and how to record. Every
key is read through ``tomlconf.Table``, so a typo or a bad value is an ``InputError``
naming the file, the key and the value (and the closest valid key), never a default.

``extends = "other"`` starts from ``scenarios/other.toml`` and overrides it key by key
(tables merge, everything else -- lists included -- replaces), which is how each CI-sized
scenario gets its ``-large`` campaign variant without repeating itself. ``--set`` applies
dotted-key overrides (``fs.type=xfs``, ``workload.ops=500``, or a unique leaf such as
``disk_size=1G``) to the merged data before validation, so they get the same checks.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import paths
from harness.config import tables as tomlconf
from harness.config.tables import Table, parse_size
from harness.errors import InputError

if TYPE_CHECKING:
    from harness.config.zfs import ZfsScenario

MiB = 1 << 20


class Kind(StrEnum):
    CRASH = "crash"
    ZFS = "zfs"  # harness/zfs/spec.py: its own keys and validation


class FsType(StrEnum):
    EXT2 = "ext2"
    EXT3 = "ext3"
    EXT4 = "ext4"
    XFS = "xfs"
    BTRFS = "btrfs"


class DataMode(StrEnum):
    JOURNAL = "journal"
    ORDERED = "ordered"
    WRITEBACK = "writeback"


class WorkloadType(StrEnum):
    OPS = "ops"
    FIO = "fio"


class StateKind(StrEnum):
    """Crash-state generators; the functions live in ``faults/crashstates.py``."""

    FUA = "fua"
    FLUSH = "flush"
    MARK = "mark"
    EVERY = "every"
    PERCENT = "percent"
    REORDER = "reorder"
    TORN = "torn"


class RecorderType(StrEnum):
    DM_LOG_WRITES = "dm-log-writes"
    QEMU_BLKLOGWRITES = "qemu-blklogwrites"


# Below these, mkfs refuses (xfsprogs >= 5.19 wants 300 MiB; btrfs-progs asks for
# 109-128 MiB depending on the version), so say so before a guest is booted.
MIN_DISK: dict[FsType, int] = {
    FsType.EXT2: 8 * MiB,
    FsType.EXT3: 16 * MiB,
    FsType.EXT4: 16 * MiB,
    FsType.XFS: 300 * MiB,
    FsType.BTRFS: 128 * MiB,
}
JOURNALED_DATA_MODES = (FsType.EXT3, FsType.EXT4)

DEFAULT_DISK = "256M"
DEFAULT_OPS = 200
DEFAULT_FILES = 16
DEFAULT_MAX_SIZE = "256K"
DEFAULT_STATES: tuple[dict[str, Any], ...] = ({"kind": "fua"},)
DEFAULT_MAX_STATES = 40
DEFAULT_REORDER_STATES = 32
DEFAULT_GUEST_BATCH = 20
DEFAULT_TIMEOUT = 600.0
DEFAULT_SEED = 1

# Keys ``--set`` understands and how a command-line string becomes a TOML value.
SETTABLE: dict[str, str] = {
    "description": "str",
    "kind": "str",
    "seed": "int",
    "fs.type": "str",
    "fs.data_mode": "str",
    "fs.mkfs_options": "list",
    "fs.mount_options": "list",
    "fs.disk_size": "size",
    "workload.type": "str",
    "workload.ops": "int",
    "workload.files": "int",
    "workload.max_size": "size",
    "workload.fsync_names": "bool",
    "workload.job": "str",
    "crash.states": "toml",
    "crash.max_states": "int",
    "check.host": "bool",
    "check.guest": "bool",
    "check.guest_batch": "int",
    "check.timeout": "float",
    "recorder.type": "str",
}


@dataclass(frozen=True)
class FsSpec:
    type: FsType
    data_mode: DataMode | None
    mkfs_options: tuple[str, ...]
    mount_options: tuple[str, ...]
    disk_size: int

    def all_mount_options(self) -> tuple[str, ...]:
        """Mount options with the data mode folded in, ready for ``mount -o``."""
        mode = (f"data={self.data_mode}",) if self.data_mode else ()
        return mode + self.mount_options


@dataclass(frozen=True)
class OpsWorkload:
    """The seeded op generator, ``harness/guest/opgen.py``."""

    ops: int
    files: int
    max_size: int
    # Does fsync(file) make the file's name durable? ext4/xfs/btrfs: yes; POSIX (ext2): no.
    fsync_names: bool = True
    type: WorkloadType = WorkloadType.OPS


@dataclass(frozen=True)
class FioWorkload:
    """A fio job file kept inline; the harness supplies the directory to run in."""

    job: str
    type: WorkloadType = WorkloadType.FIO


Workload = OpsWorkload | FioWorkload


@dataclass(frozen=True)
class StateSpec:
    kind: StateKind
    n: int | None = None
    at: tuple[float, ...] = ()
    max_states: int | None = None

    def params(self) -> dict[str, Any]:
        """Keyword arguments for the generator in ``faults/crashstates.py``."""
        out: dict[str, Any] = {}
        if self.n is not None:
            out["n"] = self.n
        if self.at:
            out["at"] = list(self.at)
        if self.max_states is not None:
            out["max_states"] = self.max_states
        return out

    def label(self) -> str:
        args = ", ".join(str(v) for v in self.params().values())
        return f"{self.kind}({args})" if args else str(self.kind)


@dataclass(frozen=True)
class CrashSpec:
    states: tuple[StateSpec, ...]
    max_states: int


@dataclass(frozen=True)
class CheckSpec:
    host: bool
    guest: bool
    guest_batch: int
    timeout: float


@dataclass(frozen=True)
class RecorderSpec:
    type: RecorderType


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    description: str
    kind: Kind
    seed: int
    fs: FsSpec
    workload: Workload
    crash: CrashSpec
    check: CheckSpec
    recorder: RecorderSpec
    extends: tuple[str, ...] = ()  # the chain of parents, nearest first
    overrides: tuple[str, ...] = ()  # the --set arguments applied

    @property
    def experiment_kind(self) -> str:
        """The experiment kind that runs this scenario (harness/experiments/)."""
        return "crash"

    def resolved(self) -> dict[str, Any]:
        """Every setting with defaults filled in; JSON-able, stored with each run."""
        fs: dict[str, Any] = {"type": str(self.fs.type)}
        if self.fs.data_mode is not None:
            fs["data_mode"] = str(self.fs.data_mode)
        fs |= {
            "mkfs_options": list(self.fs.mkfs_options),
            "mount_options": list(self.fs.mount_options),
            "disk_size": self.fs.disk_size,
        }
        w = self.workload
        workload: dict[str, Any] = (
            {
                "type": str(w.type),
                "ops": w.ops,
                "files": w.files,
                "max_size": w.max_size,
                "fsync_names": w.fsync_names,
            }
            if isinstance(w, OpsWorkload)
            else {"type": str(w.type), "job": w.job}
        )
        return {
            "name": self.name,
            "path": str(self.path),
            "extends": list(self.extends),
            "overrides": list(self.overrides),
            "description": self.description,
            "kind": str(self.kind),
            "seed": self.seed,
            "fs": fs,
            "workload": workload,
            "crash": {
                "states": [{"kind": str(s.kind), **s.params()} for s in self.crash.states],
                "max_states": self.crash.max_states,
            },
            "check": {
                "host": self.check.host,
                "guest": self.check.guest,
                "guest_batch": self.check.guest_batch,
                "timeout": self.check.timeout,
            },
            "recorder": {"type": str(self.recorder.type)},
        }


@dataclass(frozen=True)
class Broken:
    """A scenario file that did not load, as ``scenario list`` shows it."""

    name: str
    path: Path
    error: str


def _values(enum: type[StrEnum]) -> list[str]:
    # Plain strings, so "did you mean" hints show 'fua', not <StateKind.FUA: 'fua'>.
    return [m.value for m in enum]


def names(directory: Path | None = None) -> list[str]:
    d = directory or paths.scenarios_dir()
    return sorted(p.stem for p in d.glob("*.toml")) if d.is_dir() else []


def locate(name_or_path: str | Path) -> Path:
    """A scenario name (``ext4-ordered-fsync``) or a path to a TOML file."""
    s = str(name_or_path)
    if "/" in s or s.endswith(".toml"):
        p = Path(s)
        if not p.is_file():
            raise InputError(f"{p}: no such scenario file")
        return p
    p = paths.scenarios_dir() / f"{s}.toml"
    if not p.is_file():
        close = difflib.get_close_matches(s, names(), n=3, cutoff=0.5)
        hint = ("did you mean " + " or ".join(repr(c) for c in close) + "? ") if close else ""
        raise InputError(
            f"unknown scenario {s!r} (looked for {p})",
            hint=hint + "'scenario list' shows them all",
        )
    return p


def load(name_or_path: str | Path, overrides: Sequence[str] = ()) -> Scenario | ZfsScenario:
    """Load and validate a scenario; ``overrides`` are ``key=value`` strings (``--set``)."""
    path = locate(name_or_path)
    data, chain = _raw(path, ())
    if data.get("kind") == Kind.ZFS:
        from harness.config import zfs as spec

        if overrides:
            data = _merge(data, spec.parse_overrides(path, overrides))
        return spec.build(path, data, chain, tuple(overrides))
    if overrides:
        data = _merge(data, parse_overrides(path, overrides))
    return _build(path, data, chain, tuple(overrides))


def survey(
    directory: Path | None = None,
) -> tuple[list[Scenario | ZfsScenario], list[Broken]]:
    """Every scenario file, crash and ZFS; those that fail to load come back as ``Broken``."""
    d = directory or paths.scenarios_dir()
    good: list[Scenario | ZfsScenario] = []
    bad: list[Broken] = []
    for name in names(d):
        path = d / f"{name}.toml"
        try:
            good.append(load(path))
        except InputError as e:
            bad.append(Broken(name, path, e.message + (f" ({e.hint})" if e.hint else "")))
    return good, bad


def catalogue() -> list[Scenario | ZfsScenario]:
    """Every scenario that loads; ``survey`` also reports the broken ones."""
    return survey()[0]


def _raw(path: Path, seen: tuple[Path, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The file's data merged over its ``extends`` parents, and the parent chain."""
    if path.resolve() in seen:
        chain = " -> ".join(p.stem for p in (*seen, path.resolve()))
        raise InputError(f"{path}: 'extends' makes a loop: {chain}")
    data = dict(tomlconf.load(path).data)
    parent = data.pop("extends", None)
    if parent is None:
        return data, ()
    if not isinstance(parent, str):
        raise InputError(f"{path}: key 'extends' = {parent!r}: expected a scenario name")
    ppath = path.parent / f"{parent}.toml"
    if not ppath.is_file():
        hint = tomlconf.closest_hint(parent, names(path.parent))
        raise InputError(f"{path}: key 'extends' = {parent!r}: no such scenario", hint=hint)
    pdata, pchain = _raw(ppath, (*seen, path.resolve()))
    pdata.pop("name", None)  # a name always comes from the file's own stem
    return _merge(pdata, data), (parent, *pchain)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _settable_key(path: Path, key: str, raw: str) -> str:
    if key in SETTABLE:
        return key
    leaves = [k for k in SETTABLE if k.rpartition(".")[2] == key]
    if len(leaves) == 1:
        return leaves[0]
    where = f"{path}: --set {key}={raw}"
    if len(leaves) > 1:
        raise InputError(f"{where}: ambiguous key", hint="use one of " + ", ".join(leaves))
    close = difflib.get_close_matches(
        key, [*SETTABLE, *(k.rpartition(".")[2] for k in SETTABLE)], 1
    )
    hint = (f"did you mean {close[0]!r}? " if close else "") + "valid keys: " + ", ".join(SETTABLE)
    raise InputError(f"{where}: unknown key {key!r}", hint=hint)


def parse_overrides(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    """``["fs.type=xfs", "ops=50"]`` -> nested TOML-shaped data, typed per key."""
    out: dict[str, Any] = {}
    for item in overrides:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError(
                f"{path}: --set {item!r}: expected KEY=VALUE", hint="e.g. --set fs.disk_size=1G"
            )
        full = _settable_key(path, key, raw)
        value = _typed(path, full, raw.strip())
        *tables, leaf = full.split(".")
        node = out
        for t in tables:
            node = node.setdefault(t, {})
        node[leaf] = value
    return out


def _typed(path: Path, key: str, raw: str) -> Any:
    kind = SETTABLE[key]
    where = f"{path}: --set {key}={raw!r}"
    if kind in ("str", "size"):
        return raw
    if kind == "int":
        try:
            return int(raw, 0)
        except ValueError:
            raise InputError(f"{where}: expected an integer") from None
    if kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise InputError(f"{where}: expected a number") from None
    if kind == "bool":
        b = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if raw.lower() not in b:
            raise InputError(f"{where}: expected true or false")
        return b[raw.lower()]
    if kind == "list" and not raw.startswith("["):
        return [part.strip() for part in raw.split(",") if part.strip()]
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as e:
        raise InputError(
            f"{where}: not a TOML value: {e}", hint='e.g. crash.states=[{kind="fua"}]'
        ) from None


def _size_text(n: int) -> str:
    for unit, factor in (("G", 1 << 30), ("M", MiB), ("K", 1 << 10)):
        if n % factor == 0:
            return f"{n // factor}{unit}"
    return str(n)


def _positive(t: Table, name: str, value: int | float) -> None:
    if value <= 0:
        raise t.error(name, value, "must be positive")


def _build(
    path: Path, data: dict[str, Any], chain: tuple[str, ...], overrides: tuple[str, ...]
) -> Scenario:
    t = Table(path, data, prefix="")
    name = t.get("name", str, path.stem)
    if name != path.stem:
        raise t.error(
            "name", name, f"must match the file name {path.stem!r}", hint="or leave it out"
        )
    description = t.get("description", str, required=True).strip()
    kind = Kind(t.choice("kind", _values(Kind), Kind.CRASH))
    seed = t.get("seed", int, DEFAULT_SEED)
    fs = _fs(t.table("fs"))
    workload = _workload(t.table("workload"), fs)
    crash = _crash(t.table("crash"))
    check = _check(t.table("check"))
    rec = t.table("recorder")
    recorder = RecorderSpec(
        RecorderType(rec.choice("type", _values(RecorderType), RecorderType.DM_LOG_WRITES))
    )
    rec.finish()
    t.finish()
    return Scenario(
        name, path, description, kind, seed, fs, workload, crash, check, recorder, chain, overrides
    )


def _fs(t: Table) -> FsSpec:
    fstype = FsType(t.choice("type", _values(FsType)))
    data_mode: DataMode | None = None
    if fstype in JOURNALED_DATA_MODES:
        data_mode = DataMode(t.choice("data_mode", _values(DataMode), DataMode.ORDERED))
    elif t.has("data_mode"):
        raise t.error(
            "data_mode",
            t.data["data_mode"],
            f"only ext3 and ext4 have data modes, not {fstype}",
            hint="remove the key",
        )
    mkfs_options = t.str_list("mkfs_options")
    mount_options = t.str_list("mount_options")
    for opt in mount_options:
        if opt.startswith("data="):
            raise t.error(
                "mount_options",
                list(mount_options),
                f"{opt!r} belongs in data_mode",
                hint=f"set data_mode = {opt.removeprefix('data=')!r}",
            )
    disk_size = t.convert("disk_size", parse_size, DEFAULT_DISK)
    if disk_size < MIN_DISK[fstype]:
        raise t.error(
            "disk_size",
            t.data.get("disk_size", DEFAULT_DISK),
            f"{fstype} needs a disk of at least {_size_text(MIN_DISK[fstype])}",
            hint=f'set disk_size = "{_size_text(MIN_DISK[fstype])}" or more',
        )
    t.finish()
    return FsSpec(fstype, data_mode, mkfs_options, mount_options, disk_size)


def _workload(t: Table, fs: FsSpec) -> Workload:
    wtype = WorkloadType(t.choice("type", _values(WorkloadType), WorkloadType.OPS))
    ops_keys = ("ops", "files", "max_size", "fsync_names")
    if wtype is WorkloadType.FIO:
        for k in ops_keys:
            if t.has(k):
                raise t.error(k, t.data[k], "belongs to type = 'ops', not 'fio'")
        job = t.get("job", str, required=True)
        if not any(line.strip().startswith("[") for line in job.splitlines()):
            raise t.error("job", job, "a fio job needs at least one [section]")
        t.finish()
        return FioWorkload(job)
    if t.has("job"):
        raise t.error("job", t.data["job"], "belongs to type = 'fio', not 'ops'")
    ops = t.get("ops", int, DEFAULT_OPS)
    files = t.get("files", int, DEFAULT_FILES)
    max_size = t.convert("max_size", parse_size, DEFAULT_MAX_SIZE)
    fsync_names = t.get("fsync_names", bool, True)
    _positive(t, "ops", ops)
    _positive(t, "files", files)
    # Hard links share data, so files * max_size bounds the data; leave room for metadata.
    if files * max_size > fs.disk_size // 2:
        raise t.error(
            "max_size",
            t.data.get("max_size", DEFAULT_MAX_SIZE),
            f"{files} files of up to {_size_text(max_size)} may not fit in half of the "
            f"{_size_text(fs.disk_size)} disk",
            hint="lower workload.files or workload.max_size, or raise fs.disk_size",
        )
    t.finish()
    return OpsWorkload(ops, files, max_size, fsync_names)


def _crash(t: Table) -> CrashSpec:
    raw = t.get("states", list, list(DEFAULT_STATES))
    if not raw:
        raise t.error("states", raw, "needs at least one crash-state kind")
    states = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise t.error("states", item, f'item {i} must be a table such as {{kind = "fua"}}')
        states.append(_state(Table(t.path, item, prefix=f"{t.prefix}states[{i}].")))
    max_states = t.get("max_states", int, DEFAULT_MAX_STATES)
    _positive(t, "max_states", max_states)
    t.finish()
    return CrashSpec(tuple(states), max_states)


def _state(t: Table) -> StateSpec:
    kind = StateKind(t.choice("kind", _values(StateKind)))
    spec = StateSpec(kind)
    if kind is StateKind.EVERY:
        n = t.get("n", int, required=True)
        _positive(t, "n", n)
        spec = StateSpec(kind, n=n)
    elif kind is StateKind.PERCENT:
        at = t.get("at", list, required=True)
        if not at or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 100 for x in at
        ):
            raise t.error("at", at, "expected a non-empty list of percentages from 0 to 100")
        spec = StateSpec(kind, at=tuple(float(x) for x in at))
    elif kind is StateKind.REORDER:
        m = t.get("max_states", int, DEFAULT_REORDER_STATES)
        _positive(t, "max_states", m)
        spec = StateSpec(kind, max_states=m)
    t.finish()
    return spec


def _check(t: Table) -> CheckSpec:
    host = t.get("host", bool, True)
    guest = t.get("guest", bool, True)
    batch = t.get("guest_batch", int, DEFAULT_GUEST_BATCH)
    timeout = t.get("timeout", float, DEFAULT_TIMEOUT)
    _positive(t, "guest_batch", batch)
    _positive(t, "timeout", timeout)
    if not host and not guest:
        raise t.error("guest", guest, "with host = false too, nothing would check the crash states")
    t.finish()
    return CheckSpec(host, guest, batch, timeout)
