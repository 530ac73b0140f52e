"""Crash-replay scenarios (``kind = "crash"``, the default): the models of their keys,
defaults and checks (``[workload]``'s are ``workloads.py``'s). Loading (``extends``,
``--set``) is ``harness/config/scenario.py``."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from harness import filesystems
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.settings import Settings, Size, problem, size_text
from harness.config.states import StateSpec
from harness.config.workloads import (
    AppWorkload,
    FileWorkload,
    FioWorkload,
    FsstressWorkload,
    OpsWorkload,
    OracleKeys,
    Pattern,
    workload_type,
)
from harness.errors import InputError
from harness.model import recovery
from harness.model.ops import SHUTDOWN_FS

if TYPE_CHECKING:
    pass

MiB = 1 << 20


class Kind(StrEnum):
    CRASH = "crash"
    ZFS = "zfs"  # harness/experiments/zfs/settings.py


class FsType(StrEnum):
    EXT2 = "ext2"
    EXT3 = "ext3"
    EXT4 = "ext4"
    XFS = "xfs"
    BTRFS = "btrfs"
    JFS = "jfs"
    REISERFS = "reiserfs"
    F2FS = "f2fs"


class DataMode(StrEnum):
    JOURNAL = "journal"
    ORDERED = "ordered"
    WRITEBACK = "writeback"


class RecorderType(StrEnum):
    DM_LOG_WRITES = "dm-log-writes"
    QEMU_BLKLOGWRITES = "qemu-blklogwrites"


# Below these mkfs refuses, so say so before a guest is booted (harness/filesystems.py).
MIN_DISK: dict[FsType, int] = {t: filesystems.get(t).min_disk for t in FsType}
JOURNALED_DATA_MODES = (FsType.EXT3, FsType.EXT4)

DEFAULT_DISK = 256 * MiB
DEFAULT_MAX_STATES = 40
DEFAULT_GUEST_BATCH = 20
DEFAULT_TIMEOUT = 600.0
DEFAULT_SEED = 1


def journaled(fs_type: str, mkfs_options: Sequence[str] | str) -> bool:
    """Whether a filesystem keeps a journal or log: ext2, and ext3/4 made with
    ``-O ^has_journal``, do not; they recover with a full fsck, so after a crash fsck
    repairing them is their design, not a finding (the crash and recovery kinds' rule)."""
    if fs_type in [str(t) for t in JOURNALED_DATA_MODES]:
        opts = [mkfs_options] if isinstance(mkfs_options, str) else mkfs_options
        return not any("^has_journal" in o for o in opts)
    return filesystems.get(fs_type).journaled


class FsSpec(Settings):
    """The filesystem under test: how it is made and mounted."""

    type: FsType
    data_mode: DataMode | None = Field(None, description="ext3/ext4 only; default ordered")
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    disk_size: Size = Field(DEFAULT_DISK, description="size of the disk under test")
    fill: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="fill the filesystem to this fraction before the workload, its free "
        "space left in holes (harness/guest/fill.py; beyond what it gives to data, e.g. "
        "ext4's ~0.977, it is left full); ops may then fail with ENOSPC, and are recorded "
        "as failed (0: no fill)",
    )
    devices: int = Field(
        1,
        ge=1,
        le=2,
        description="2: a second device, each on its own dm-log-writes with its own volatile "
        "cache: the journal or log (ext3/ext4 -J device=, xfs -l logdev=), or a mirror "
        "(btrfs -d raid1 -m raid1)",
    )

    @model_validator(mode="after")
    def _check(self) -> FsSpec:
        if self.type in JOURNALED_DATA_MODES and self.journaled:
            if self.data_mode is None:
                object.__setattr__(self, "data_mode", DataMode.ORDERED)
        elif self.data_mode is not None:
            # ext4 refuses any data= on a filesystem made without a journal ("can't mount
            # with data=, fs mounted w/o journal", fs/ext4/super.c), so it has no mode.
            raise problem(
                f"only ext3 and ext4 with a journal have data modes, not {self.type}"
                + ("" if self.journaled else " without one"),
                "remove the key",
                key="data_mode",
            )
        for opt in self.mount_options:
            if opt.startswith("data="):
                raise problem(
                    f"{opt!r} belongs in data_mode",
                    f"set data_mode = {opt.removeprefix('data=')!r}",
                    key="mount_options",
                )
        if self.fast_commit and self.type != FsType.EXT4:
            raise problem(
                f"fast_commit is a feature of ext4's journal, not of {self.type}",
                "fs.type = 'ext4', or drop fast_commit from fs.mkfs_options",
                key="mkfs_options",
            )
        if self.devices == 2 and self.second_device is None:
            can = [str(t) for t in FsType if filesystems.get(t).second_device]
            raise problem(
                f"{self.type}"
                + ("" if self.journaled else " without a journal")
                + " is made on one device only",
                f"fs.devices = 1, or fs.type one of {', '.join(can)} (with a journal)",
                key="devices",
            )
        least = MIN_DISK[self.type]
        if self.disk_size < least:
            raise problem(
                f"{self.type} needs a disk of at least {size_text(least)}",
                f'set disk_size = "{size_text(least)}" or more',
                key="disk_size",
            )
        return self

    @property
    def journaled(self) -> bool:
        return journaled(self.type, self.mkfs_options)

    @property
    def fast_commit(self) -> bool:
        """ext4's fast commits (``mkfs -O fast_commit``): an fsync logs the inode's own
        changes in the journal's fast-commit area, replayed after the journal."""
        words = [
            w for o in self.mkfs_options for w in o.replace("-O", " ").replace(",", " ").split()
        ]
        return "fast_commit" in words

    @property
    def second_device(self) -> filesystems.SecondDevice | None:
        """The second device (``devices = 2``), else None."""
        if self.devices < 2 or not self.journaled:
            return None
        return filesystems.get(self.type).second_device

    @property
    def second_size(self) -> int:
        sd = self.second_device
        return (sd.size or self.disk_size) if sd else 0

    def all_mount_options(self, dev2: str = "") -> tuple[str, ...]:
        """Mount options with the data mode folded in, ready for ``mount -o``; with the
        second device's path when there is one (``dev2``)."""
        mode = (f"data={self.data_mode}",) if self.data_mode else ()
        ld = self.second_device
        named = (ld.mount_option.format(dev=dev2),) if ld and dev2 else ()
        return mode + self.mount_options + named

    def second_flags(self, dev2: str) -> list[str]:
        """What the checker is told of the second device at ``dev2`` ([] without one,
        or when the checker finds it by scanning)."""
        sd = self.second_device
        flags = (sd.check_flags or ()) if sd and dev2 else ()
        return [f.format(dev=dev2) for f in flags]

    def mkfs_argv(self, dev: str, dev2: str = "") -> list[str]:
        sd = self.second_device
        flags = [f.format(dev=dev2) for f in sd.mkfs_flags] if sd and dev2 else []
        mirror = [dev2] if sd and dev2 and sd.role == "mirror" else []
        return [*filesystems.get(self.type).mkfs, *flags, *self.mkfs_options, dev, *mirror]

    def mount_argv(
        self, dev: str, target: str, extra: Sequence[str] = (), dev2: str = ""
    ) -> list[str]:
        opts = [*self.all_mount_options(dev2), *extra]
        return [
            "mount",
            "-t",
            str(self.type),
            *(["-o", ",".join(opts)] if opts else []),
            dev,
            target,
        ]


Method = Literal["power-cut", "shutdown", "shutdown-logflush", "shutdown-nologflush"]


def check_ordered(fs: FsSpec, ordered: bool) -> None:
    """The ordered-metadata profile is one journal committing in order: an fsync under
    fast commits logs only its inode's changes, so earlier namespace ops may not be."""
    if ordered and fs.fast_commit:
        raise problem(
            "fast commits log an fsync'd inode's own changes, not every earlier namespace "
            "op: the ordered-metadata profile does not hold (docs/verdicts.md rule 18)",
            "drop workload.ordered_metadata, or fast_commit from fs.mkfs_options",
            key="workload.ordered_metadata",
        )


def check_method(fs: FsSpec, crash: CrashSpec) -> None:
    """A shutdown needs a filesystem with FS_IOC_SHUTDOWN."""
    if crash.method != "power-cut" and str(fs.type) not in SHUTDOWN_FS:
        raise problem(
            f"{fs.type} has no shutdown ioctl (FS_IOC_SHUTDOWN) for {crash.method!r}",
            f"crash.method = 'power-cut', or fs.type one of {', '.join(SHUTDOWN_FS)}",
            key="crash.method",
        )


class CrashSpec(Settings):
    states: tuple[StateSpec, ...] = Field(
        ({"kind": "fua"},),  # validated like any value
        min_length=1,
        description="crash-state generators (harness/config/states.py)",
        validate_default=True,
    )
    max_states: int = Field(DEFAULT_MAX_STATES, ge=1, description="spread evenly over the log")
    after_mark: str = Field(
        "crashlab:mkfs",
        min_length=1,
        description="states start after this mark of the log (its text, e.g. "
        "crashlab:sync:3), or 'setup': after an application pattern's files were written "
        "and synced, so every state falls in the updates",
    )
    corrupt: Literal["none", "zero-durable-block"] = Field(
        "none", description="a positive control: damage each replayed state before the check"
    )
    method: Method = Field(
        "power-cut",
        description="how the workload ends: power-cut (a sync, then the log is cut "
        "anywhere), or FS_IOC_SHUTDOWN with its flag -- shutdown (a freeze first), "
        "shutdown-logflush, shutdown-nologflush -- whose own state the disk keeps whole "
        "(harness/model/ops.py)",
    )

    def end_op(self) -> str:
        """The op that ends the workload (opgen's --end)."""
        return "sync" if self.method == "power-cut" else self.method.replace("-", "_")


def parse_dask_target(text: str) -> tuple[str, Any]:
    """``local:N`` -> ("local", N); ``tcp://host:port`` -> ("tcp", the address).

    :raise InputError: anything else, naming the value and the two forms.
    """
    if text.startswith("local:") and text[6:].isdigit() and int(text[6:]) > 0:
        return "local", int(text[6:])
    if text.startswith(("tcp://", "tls://")) and ":" in text.split("://", 1)[1]:
        return "tcp", text
    raise InputError(
        f"--dask {text!r}: not a Dask cluster",
        hint="local:N starts N local workers; tcp://HOST:PORT uses a running `dask scheduler`",
    )


class CheckSpec(Settings):
    host: bool = True
    guest: bool = True
    guest_batch: int = Field(DEFAULT_GUEST_BATCH, ge=1)
    guests: int = Field(
        1,
        ge=1,
        le=8,
        description="check guests running at once, each with a batch: 2 nearly halves a "
        "search's checking on a 2-core host; 1 keeps recovery times measured on an idle host",
    )
    timeout: float = Field(
        DEFAULT_TIMEOUT, gt=0, le=settings.MAX_SECONDS, description="seconds per check command"
    )
    dask: str = Field(
        "",
        description="host checks on a Dask cluster: local:N or tcp://HOST:PORT (guest = false)",
    )
    times: bool = Field(
        True,
        description="judge mtime and ctime (oracle rule 20); false leaves times out, for a "
        "filesystem whose times are known to be lost (docs/findings) when data is the question",
    )
    recovery: tuple[str, ...] = Field(
        (recovery.RW,),
        description="how the guest recovers each state (harness/model/recovery.py): rw, ro, "
        "ro-device, the filesystem's no-replay option (noload, norecovery, nologreplay), "
        "remount; rw always runs",
    )

    @model_validator(mode="after")
    def _something(self) -> CheckSpec:
        if not self.host and not self.guest:
            raise problem(
                "with host = false too, nothing would check the crash states", key="guest"
            )
        if self.dask:
            try:
                parse_dask_target(self.dask)
            except InputError as e:
                raise problem(e.message, e.hint, key="dask") from None
            if self.guest:
                raise problem(
                    "Dask runs the host checks; the guest checks stay on this host",
                    "add --set check.guest=false",
                    key="dask",
                )
        return self


def check_devices(fs: FsSpec, crash: CrashSpec, check: CheckSpec, kind: str = "crash") -> None:
    """What a second device (``fs.devices = 2``) can be checked with: states cut at
    marks (the one cut of two logs they order, harness/crashstate/checking.py:
    SecondLog), in a guest (every recovery mode overlays both devices)."""
    if fs.devices < 2:
        return
    if kind != "crash":
        raise problem(
            f"a {kind} scenario records or reads one log; a second device is a crash scenario's",
            "fs.devices = 1, or kind = 'crash'",
            key="fs.devices",
        )
    kinds = sorted({str(st.kind) for st in crash.states} - {"mark"})
    if kinds:
        raise problem(
            f"with a second device, crash states are cut at marks, where both logs agree; "
            f"{', '.join(kinds)} would cut one log between them",
            "crash.states = [{kind = 'mark'}]",
            key="crash.states",
        )
    if not check.guest:
        raise problem(
            "with a second device, a state is judged in a guest, both devices attached",
            "check.guest = true",
            key="check.guest",
        )


def check_recovery(fs: FsSpec, check: CheckSpec) -> None:
    """A scenario's recovery modes are ones its filesystem offers, rw among them."""
    offered = recovery.modes_of(str(fs.type))
    for mode in check.recovery:
        if mode not in offered:
            raise problem(
                f"{fs.type} has no recovery mode {mode!r}",
                f"its modes: {', '.join(offered)}",
                key="check.recovery",
            )
    if recovery.RW not in check.recovery:
        raise problem(
            "every check recovers by a read-write mount (its checker runs after it)",
            f"add {recovery.RW!r} to check.recovery",
            key="check.recovery",
        )
    if len(check.recovery) > 1 and not check.guest:
        raise problem(
            "recovery modes are mounts in a guest", "set check.guest = true",
            key="check.recovery",
        )  # fmt: skip


class RecoveryCrashSpec(Settings):
    """A crash during recovery (``harness/crashstate/recoverycrash.py``): the
    filesystem's own recovery of a sample of crash states, recorded and cut again."""

    sample: int = Field(
        0,
        ge=0,
        le=64,
        description="consistent crash states whose recovery is recorded under dm-log-writes"
        " and cut into crash states too (0: none)",
    )
    max_states: int = Field(
        20, ge=1, description="crash states per recovery log, spread evenly over it"
    )


class RecorderSpec(Settings):
    type: RecorderType = RecorderType.DM_LOG_WRITES


class Scenario(ScenarioBase):
    """A crash-replay scenario (``kind = "crash"``, the default)."""

    kind: Literal[Kind.CRASH] = Kind.CRASH
    fs: FsSpec
    workload: Annotated[
        Annotated[OpsWorkload, Tag("ops")]
        | Annotated[FioWorkload, Tag("fio")]
        | Annotated[AppWorkload, Tag("app")]
        | Annotated[FsstressWorkload, Tag("fsstress")]
        | Annotated[FileWorkload, Tag("file")],
        Discriminator(workload_type),
    ] = Field(default_factory=OpsWorkload)
    crash: CrashSpec = Field(default_factory=CrashSpec)
    check: CheckSpec = Field(default_factory=CheckSpec)
    recorder: RecorderSpec = Field(default_factory=RecorderSpec)
    recovery_crash: RecoveryCrashSpec = Field(default_factory=RecoveryCrashSpec)

    @model_validator(mode="after")
    def _recovery_modes(self) -> Scenario:
        check_recovery(self.fs, self.check)
        check_devices(self.fs, self.crash, self.check)
        check_method(self.fs, self.crash)
        check_ordered(self.fs, bool(getattr(self.workload, "ordered_metadata", False)))
        if getattr(self.workload, "processes", 1) > 1 and self.fs.fill:
            raise problem(
                "a full disk's failed ops are recorded one process at a time",
                "fs.fill = 0, or workload.processes = 1",
                key="workload.processes",
            )
        if self.fs.devices > 1 and not isinstance(self.workload, OpsWorkload | FileWorkload):
            raise problem(
                "a log device is recorded with the op workloads (ops, file), which mark both",
                "fs.devices = 1 for this workload",
                key="fs.devices",
            )
        if self.fs.devices > 1 and (self.recovery_crash.sample or self.crash.corrupt != "none"):
            raise problem(
                "a recovery crash or a damaged state is made on the filesystem's device alone",
                "fs.devices = 1, or recovery_crash.sample = 0 and crash.corrupt = 'none'",
                key="fs.devices",
            )
        if self.fs.devices > 1 and self.recorder.type != RecorderType.DM_LOG_WRITES:
            raise problem(
                "qemu-blklogwrites logs one disk", "recorder.type = 'dm-log-writes'",
                key="recorder.type",
            )  # fmt: skip
        if self.crash.method != "power-cut" and not isinstance(
            self.workload, OpsWorkload | FileWorkload
        ):
            raise problem(
                f"{self.crash.method} ends the op workloads (ops, file)",
                "crash.method = 'power-cut' for this workload",
                key="crash.method",
            )
        return self

    @model_validator(mode="after")
    def _recovery_crash_needs_a_guest(self) -> Scenario:
        if self.recovery_crash.sample and not self.check.guest:
            raise problem(
                "a recovery crash state is judged by the original cut's oracle in a guest",
                "set check.guest = true",
                key="recovery_crash.sample",
            )
        return self

    def _check_defrag(self) -> None:
        """e4defrag moves extents (EXT4_IOC_MOVE_EXT): ext4 made with extents only."""
        fs = self.fs
        no_extents = [o for o in fs.mkfs_options if "^extent" in o]
        if fs.type != FsType.EXT4 or no_extents:
            raise problem(
                f"e4defrag needs ext4 with extents, not {fs.type}"
                + (f" made with {no_extents}" if no_extents else ""),
                "set fs.type = 'ext4' and drop '^extent' from fs.mkfs_options",
                key="workload.pattern",
            )

    @model_validator(mode="after")
    def _workload_fits(self) -> Scenario:
        w = self.workload
        if isinstance(w, AppWorkload) and w.pattern == Pattern.E4DEFRAG:
            self._check_defrag()
        if not isinstance(w, OpsWorkload | FileWorkload):
            return self
        if isinstance(w, FileWorkload):
            # Its ops are checked before a run starts (crashstate/recording.py: file_ops):
            # their parser is the guest's (stdlib), below this step.
            return self._oracle_keys(w)
        # Hard links share data, so files * max_size bounds the data; leave room for metadata.
        if w.files * w.max_size > self.fs.disk_size // 2:
            raise problem(
                f"{w.files} files of up to {size_text(w.max_size)} may not fit in half of the "
                f"{size_text(self.fs.disk_size)} disk",
                "lower workload.files or workload.max_size, or raise fs.disk_size",
                key="workload.max_size",
            )
        if self.crash.corrupt != "none" and (
            self.expect != "findings" or self.fs.type not in (*JOURNALED_DATA_MODES, FsType.EXT2)
        ):
            raise problem(
                "damaging the states is a positive control for ext2/3/4",
                "declare expect = 'findings' (and use an ext filesystem)",
                key="crash.corrupt",
            )
        return self._oracle_keys(w)

    def _oracle_keys(self, w: OracleKeys) -> Scenario:
        """The keys every workload the oracle judges has: a positive control declared
        as one, and whose fsync makes names durable (per filesystem unless set)."""
        if w.noop_sync and self.expect != "findings":
            raise problem(
                "a workload that never really syncs can only lose data",
                "it is a positive control: declare expect = 'findings'",
                key="workload.noop_sync",
            )
        promised = self.fs.journaled
        if w.fsync_names is None:
            object.__setattr__(self, "workload", w.model_copy(update={"fsync_names": promised}))
        elif w.fsync_names and not promised and self.expect != "findings":
            raise problem(
                f"{self.fs.type} without a journal does not make a file's name durable on "
                "fsync(file), and POSIX does not promise it: every such state would be a "
                "false data_loss",
                "leave workload.fsync_names unset, or declare expect = 'findings'",
                key="workload.fsync_names",
            )
        return self

    def fs_types(self) -> tuple[str, ...]:
        return (str(self.fs.type),)

    def catalogue_row(self) -> tuple[str, str, str, str]:
        w, c = self.workload, self.crash
        return (
            str(self.fs.type),
            str(self.fs.data_mode or "-"),
            f"{w.type} x{w.ops}"
            if isinstance(w, OpsWorkload | FsstressWorkload)
            else str(getattr(w, "pattern", w.type)),
            ", ".join(st.label() for st in c.states) + f" (<= {c.max_states})",
        )

    def resolved(self) -> dict[str, Any]:
        out = super().resolved()
        # Where the checks ran is not what was checked: a run resumes on another cluster.
        del out["check"]["dask"]
        if out["fs"]["data_mode"] is None:
            del out["fs"]["data_mode"]
        if not self.recovery_crash.sample:
            # Off: stored as before the key existed, so earlier runs still resume.
            del out["recovery_crash"]
        return out


SETTABLE = settings.settable(Scenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
