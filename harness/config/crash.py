"""Crash-replay scenarios (``kind = "crash"``, the default): the models of their keys,
defaults and checks. Loading (``extends``, ``--set``) is ``harness/config/scenario.py``."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from harness import filesystems
from harness.config import fiojob, settings
from harness.config.base import ScenarioBase
from harness.config.settings import Settings, Size, problem, size_text
from harness.config.states import StateSpec
from harness.errors import InputError
from harness.model.families import FAMILIES, OPGEN_NEVER, closest

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


class WorkloadType(StrEnum):
    OPS = "ops"
    FIO = "fio"
    APP = "app"
    FSSTRESS = "fsstress"
    FILE = "file"


class Pattern(StrEnum):
    """Application update patterns (``harness/guest/apppat.py``)."""

    REPLACE_RENAME = "replace-rename"
    REPLACE_TRUNCATE = "replace-truncate"
    APPEND_LOG = "append-log"
    SQLITE_COMMIT = "sqlite-commit"
    E4DEFRAG = "e4defrag"


class RecorderType(StrEnum):
    DM_LOG_WRITES = "dm-log-writes"
    QEMU_BLKLOGWRITES = "qemu-blklogwrites"


# Below these mkfs refuses, so say so before a guest is booted (harness/filesystems.py).
MIN_DISK: dict[FsType, int] = {t: filesystems.get(t).min_disk for t in FsType}
JOURNALED_DATA_MODES = (FsType.EXT3, FsType.EXT4)

DEFAULT_DISK = 256 * MiB
DEFAULT_OPS = 200
DEFAULT_FILES = 16
DEFAULT_MAX_SIZE = 256 << 10
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

    def all_mount_options(self) -> tuple[str, ...]:
        """Mount options with the data mode folded in, ready for ``mount -o``."""
        mode = (f"data={self.data_mode}",) if self.data_mode else ()
        return mode + self.mount_options

    def mkfs_argv(self, dev: str) -> list[str]:
        return [*filesystems.get(self.type).mkfs, *self.mkfs_options, dev]

    def mount_argv(self, dev: str, target: str, extra: Sequence[str] = ()) -> list[str]:
        opts = [*self.all_mount_options(), *extra]
        return [
            "mount",
            "-t",
            str(self.type),
            *(["-o", ",".join(opts)] if opts else []),
            dev,
            target,
        ]


def ordered_metadata_field() -> Any:
    """``ordered_metadata``, as workload files and searches both take it."""
    return Field(
        False,
        description="judge by the ordered-metadata profile too: namespace ops persist in "
        "order (oracle rule 18; ext4, xfs, and what btrfs's maintainers test against)",
    )


def check_family(name: str) -> None:
    """An op family's name (harness/model/families.py), or the closest ones as a hint."""
    if name and name not in FAMILIES:
        raise problem(
            f"unknown family {name!r}", "closest: " + ", ".join(closest(name)), key="family"
        )


class OracleKeys(Settings):
    """The keys of a workload the oracle judges (``harness/model/oracle/``)."""

    # Does fsync(file) make the file's *name* durable? Journaled ext3/ext4, xfs, btrfs:
    # yes. POSIX does not promise it, and ext2 (or ext4 without a journal) does not do
    # it; unset, it follows from the filesystem (the scenario's validator fills it in).
    fsync_names: bool | None = Field(
        None, description="require names made durable by a file fsync (default: per fs)"
    )
    noop_sync: bool = Field(
        False, description="a positive control: 'sync' without calling fsync; expect findings"
    )


class OpsWorkload(OracleKeys):
    """The seeded op generator, ``harness/guest/opgen.py``."""

    type: Literal["ops"] = "ops"
    ops: int = Field(DEFAULT_OPS, ge=1)
    files: int = Field(DEFAULT_FILES, ge=1)
    max_size: Size = DEFAULT_MAX_SIZE
    # An experiment, not a setting: after every sync call, fsync the device under test
    # too (its dirty buffer cache, then a cache FLUSH) before the mark. A loss that this
    # makes go away was a write the filesystem's fsync left unwritten or unflushed
    # (docs/findings/ext2-nojournal-fsync-6.1.md).
    flush_after_sync: bool = Field(
        False, description="experiment: fsync the block device after every sync call"
    )
    # Off by default so that every seed keeps drawing the workload it always drew.
    extended: bool = Field(
        False,
        description="also O_DIRECT/mmap writes, fallocate modes, xattrs, rmdir, O_SYNC and"
        " O_DSYNC writes, sync_file_range, syncfs",
    )
    bug_ops: bool = Field(
        False,
        description="also the ops this year's real bugs needed: truncate to 0, symlink, "
        "chmod, RENAME_EXCHANGE / NOREPLACE, writes and fsyncs through a descriptor held "
        "across unlink",
    )
    family: str = Field(
        "",
        description="only a workload of this op family (harness/model/families.py): seeds "
        "are drawn from the run's, in a fixed order, until one's workload is; the oracle "
        "keeps the seed drawn",
    )

    @model_validator(mode="after")
    def _family(self) -> OpsWorkload:
        f = self.family
        check_family(f)
        if f in OPGEN_NEVER:
            hint = f"search ACE's grammar instead: scenario run ace-seq2 --set workload.family={f}"
            raise problem(f"{f}: {OPGEN_NEVER[f]}", hint, key="family")
        if f == "held-fd" and not self.bug_ops:
            raise problem(
                "held-fd needs descriptors held across unlink", "set workload.bug_ops = true",
                key="family",
            )  # fmt: skip
        return self


class FioWorkload(Settings):
    """A fio job file kept inline; the harness supplies the directory to run in."""

    type: Literal["fio"]
    job: str
    sections: int = Field(
        0,
        ge=0,
        le=64,
        description="judge the states by data: split the job into this many fsync'd,"
        " marked sections (harness/record/fiojob.py); 0: fsck and mount only",
    )

    @field_validator("job")
    @classmethod
    def _sections(cls, job: str) -> str:
        if not any(line.strip().startswith("[") for line in job.splitlines()):
            raise problem("a fio job needs at least one [section]")
        return job

    @model_validator(mode="after")
    def _judgeable(self) -> FioWorkload:
        if self.sections:
            try:
                fiojob.parse(self.job, self.sections)
            except fiojob.JobError as e:
                # The key is relative: this model sits under `workload`, which prefixes it.
                raise problem(
                    str(e),
                    "change the job, or set workload.sections = 0 (fsck and mount only)",
                    key="job",
                ) from None
        return self


class AppWorkload(Settings):
    """An application update pattern, every case of it in one recording; each crash
    state says what it left of every target file (``harness/guest/apppat.py``)."""

    type: Literal["app"]
    pattern: Pattern
    files: int = Field(2, ge=1, le=64, description="target files per case (file patterns)")
    size: Size = Field(16 << 10, description="largest content of a target or a row, bytes")
    transactions: int = Field(4, ge=1, le=200, description="sqlite-commit: per database")


class FsstressWorkload(Settings):
    """fstests' fsstress as generic/482 runs it (``harness/record/fsstress.py``): no
    oracle, so each crash state is judged by fsck and mount only."""

    type: Literal["fsstress"]
    ops: int = Field(512, ge=1, description="operations per process (-n); generic/482: 512")
    procs: int | None = Field(
        None, ge=1, le=64, description="processes (-p); default the guest's CPUs, at most 8"
    )
    binary: str = Field(
        "", description="a static fsstress on the host (default: scenario image fsstress's)"
    )
    keep_log: str = Field(
        "",
        description="also leave the recorded log here, relative to the results directory"
        " (scenario check-log-generic-482 reads logs/generic-482.log)",
    )

    @field_validator("keep_log")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v and (v.startswith("/") or ".." in Path(v).parts):
            raise problem(
                f"{v!r} leaves the results directory", "give a path like logs/generic-482.log"
            )
        return v


class FileWorkload(OracleKeys):
    """A workload file (``harness/model/opfile.py``): a bug report's steps, one op a line,
    judged at every persistence point by the same oracle as the op generator's."""

    type: Literal["file"]
    path: str = Field("", description="the op file (relative paths: from the current directory)")
    text: str = Field(
        "", description="the ops themselves (filled from `path`; a run keeps what it ran)"
    )
    ordered_metadata: bool = ordered_metadata_field()

    @model_validator(mode="after")
    def _read(self) -> FileWorkload:
        if self.path and not self.text:
            try:
                text = Path(self.path).expanduser().read_text()
            except OSError as e:
                raise problem(
                    f"{self.path}: {e.strerror}", "a file of ops, one a line", key="path"
                ) from None
            object.__setattr__(self, "text", text)
        if not self.text:
            raise problem("a file workload needs its ops", "set workload.path", key="path")
        return self


Workload = OpsWorkload | FioWorkload | AppWorkload | FsstressWorkload | FileWorkload


def _workload_type(v: Any) -> str:
    """``type`` picks the workload model; without it, the op generator."""
    return str(v.get("type", "ops") if isinstance(v, dict) else getattr(v, "type", "ops"))


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
        Discriminator(_workload_type),
    ] = Field(default_factory=OpsWorkload)
    crash: CrashSpec = Field(default_factory=CrashSpec)
    check: CheckSpec = Field(default_factory=CheckSpec)
    recorder: RecorderSpec = Field(default_factory=RecorderSpec)
    recovery_crash: RecoveryCrashSpec = Field(default_factory=RecoveryCrashSpec)

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
