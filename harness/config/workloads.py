"""Workload models: ``[workload]`` of a crash scenario, one model per ``type`` (the op
generator, a fio job, an application pattern, fsstress, a workload file), as
``states.py`` holds ``[[crash.states]]``'s. Apart from ``crash.py`` (the scenario that
takes one) because a search and the fault kind take them too."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.config import fiojob
from harness.config.settings import Settings, Size, problem
from harness.model.families import FAMILIES, OPGEN_NEVER, closest


class Pattern(StrEnum):
    """Application update patterns (``harness/guest/apppat.py``)."""

    REPLACE_RENAME = "replace-rename"
    REPLACE_TRUNCATE = "replace-truncate"
    APPEND_LOG = "append-log"
    SQLITE_COMMIT = "sqlite-commit"
    E4DEFRAG = "e4defrag"


DEFAULT_OPS = 200
DEFAULT_FILES = 16
DEFAULT_MAX_SIZE = 256 << 10


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


# Threads in one guest of 2 vCPUs (and one model each, for drawing): past 8 they only
# queue, and the guest's memory holds every process's file data twice.
MAX_PROCESSES = 8


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
    processes: int = Field(
        1,
        ge=1,
        le=MAX_PROCESSES,
        description="draw and call the ops in this many processes at once, each in its own "
        "directory (harness/guest/procs.py: an fsync racing another's writes and renames)",
    )

    @model_validator(mode="after")
    def _family(self) -> OpsWorkload:
        f = self.family
        check_family(f)
        if f in OPGEN_NEVER:
            hint = f"search ACE's grammar instead: scenario run ace-seq2 --set workload.family={f}"
            raise problem(f"{f}: {OPGEN_NEVER[f]}", hint, key="family")
        if f and self.processes > 1:
            raise problem(
                "a family is the shape of one sequence of ops; processes draw their own",
                "drop workload.family, or set workload.processes = 1", key="processes",
            )  # fmt: skip
        if self.processes > self.files:
            raise problem(
                f"{self.processes} processes share {self.files} files: each needs one",
                f"workload.files = {self.processes} or more", key="processes",
            )  # fmt: skip
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


def workload_type(v: Any) -> str:
    """``type`` picks the workload model; without it, the op generator."""
    return str(v.get("type", "ops") if isinstance(v, dict) else getattr(v, "type", "ops"))
