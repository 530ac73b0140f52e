"""Workload scenarios (``kind = "workload"``): one fio job on several filesystems, each in
a fresh guest, measured with fio's JSON, /proc/stat and blktrace
(``harness/experiments/workload/experiment.py``).

A cell is a filesystem and its options: ext2, ext3/ext4 in a data mode, xfs, btrfs, or a
single-disk ZFS pool with dataset properties (``properties = {dedup = "on", recordsize = "4K"}``).
The fio job is kept inline; ``${SIZE}`` and ``${RUNTIME}`` in it are fio's own
environment-variable expansion, filled from ``fio.size`` and ``fio.runtime``, so a
CI-sized run is ``--set fio.size=4M --set fio.runtime=3`` on the same job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness import filesystems
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.settings import Settings, Size, problem, size_text

MiB = 1 << 20
DATA_MODE_FS = ("ext3", "ext4")
# mkfs refuses smaller disks (harness/filesystems.py; ZFS: vdevs of 64 MiB or more).
MIN_DISK = {**{t: fs.min_disk for t, fs in filesystems.FILESYSTEMS.items()}, "zfs": 64 * MiB}

# Dataset properties `zfs create -o` / `zpool create -O` accept (OpenZFS 2.1/2.2,
# zfsprops(7)): an unknown one is an error here, before a guest boots.
ZFS_PROPERTIES = frozenset(
    (
        "aclinherit",
        "aclmode",
        "acltype",
        "atime",
        "canmount",
        "checksum",
        "compression",
        "copies",
        "dedup",
        "devices",
        "dnodesize",
        "exec",
        "logbias",
        "mountpoint",
        "primarycache",
        "quota",
        "readonly",
        "recordsize",
        "redundant_metadata",
        "refquota",
        "refreservation",
        "relatime",
        "reservation",
        "secondarycache",
        "setuid",
        "snapdev",
        "snapdir",
        "special_small_blocks",
        "sync",
        "volmode",
        "xattr",
        "zoned",
        "casesensitivity",
        "normalization",
        "utf8only",
    )
)


class IoCell(Settings):
    """One filesystem the job runs on."""

    type: Literal["ext2", "ext3", "ext4", "xfs", "btrfs", "zfs"]
    data_mode: Literal["journal", "ordered", "writeback"] | None = Field(
        None, description="ext3/ext4 only; default ordered"
    )
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    properties: dict[str, str] = Field(
        default_factory=dict, description="ZFS dataset properties: dedup, compression, ..."
    )
    label: str = Field("", description="name of the cell in tables (default: type + options)")

    @model_validator(mode="after")
    def _check(self) -> IoCell:
        if self.type in DATA_MODE_FS:
            if self.data_mode is None:
                object.__setattr__(self, "data_mode", "ordered")
        elif self.data_mode is not None:
            raise problem(f"only ext3 and ext4 have data modes, not {self.type}", key="data_mode")
        if self.properties and self.type != "zfs":
            raise problem(
                f"ZFS properties on a {self.type} cell", "remove the key", key="properties"
            )
        for prop, value in self.properties.items():
            if prop not in ZFS_PROPERTIES:
                raise problem(
                    f"unknown ZFS property {prop!r}",
                    "known: " + ", ".join(sorted(ZFS_PROPERTIES)),
                    key=f"properties.{prop}",
                )
            if not value.strip():
                raise problem(f"ZFS property {prop!r} has no value", key=f"properties.{prop}")
        for opt in self.mount_options:
            if opt.startswith("data="):
                raise problem(f"{opt!r} belongs in data_mode", key="mount_options")
        return self

    def name(self) -> str:
        if self.label:
            return self.label
        parts: list[str] = [self.type]
        if self.data_mode:
            parts.append(f"data={self.data_mode}")
        parts += [f"{k}={v}" for k, v in sorted(self.properties.items())]
        return " ".join([*parts, *self.mkfs_options, *self.mount_options])

    def mkfs_argv(self) -> list[str]:
        """mkfs without the device (the guest program appends it); ZFS: none."""
        if self.type == "zfs":
            return []
        force = "-f" if self.type in ("xfs", "btrfs") else "-F"
        return [f"mkfs.{self.type}", force, "-q", *self.mkfs_options]

    def mount_opts(self) -> list[str]:
        return [*([f"data={self.data_mode}"] if self.data_mode else []), *self.mount_options]


class FioSpec(Settings):
    """``[fio]``: the job, and the values of ``${SIZE}`` and ``${RUNTIME}`` in it."""

    job: str = Field(description="a fio job file; the harness supplies the directory")
    size: Size = Field(64 * MiB, description="${SIZE} in the job")
    runtime: int = Field(20, ge=1, description="${RUNTIME} in the job, seconds")
    origin: str = Field("", description="where the job came from (an imported vdbench file)")

    @field_validator("job")
    @classmethod
    def _sections(cls, job: str) -> str:
        if not any(line.strip().startswith("[") for line in job.splitlines()):
            raise problem("a fio job needs at least one [section]")
        for bad in ("directory",):
            if any(line.strip().startswith(f"{bad}=") for line in job.splitlines()):
                raise problem(f"the harness sets {bad}=; remove it from the job")
        return job

    def env(self) -> dict[str, str]:
        return {"SIZE": str(self.size), "RUNTIME": str(self.runtime)}


class WorkloadScenario(ScenarioBase):
    kind: Literal["workload"]
    repetitions: int = Field(1, ge=1, description="fresh guests per cell")
    cells: tuple[IoCell, ...] = Field(min_length=1)
    disk_size: Size = Field(1024 * MiB, description="the disk under test")
    fio: FioSpec
    blktrace: bool = Field(True, description="trace the device under test")
    snapshot_every: float | None = Field(
        None, gt=0, description="seconds between snapshots during the job (zfs, btrfs cells)"
    )
    memory_mb: int = Field(1024, ge=256)
    timeout: float = Field(
        1200.0, gt=0, le=settings.MAX_SECONDS, description="seconds one cell may take in its guest"
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadScenario:
        for i, cell in enumerate(self.cells):
            least = MIN_DISK[cell.type]
            if self.disk_size < least:
                raise problem(
                    f"{cell.type} (cells[{i}]) needs a disk of at least {size_text(least)}",
                    key="disk_size",
                )
        names = [c.name() for c in self.cells]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise problem(f"two cells are both {dup!r}", "give one a label", key="cells")
        return self

    def kernel_modules(self) -> tuple[str, ...]:
        return ("zfs",) if any(c.type == "zfs" for c in self.cells) else ()

    def catalogue_row(self) -> tuple[str, str, str, str]:
        return (
            ",".join(dict.fromkeys(c.type for c in self.cells)),
            f"{len(self.cells)} cells",
            f"fio {size_text(self.fio.size)} {self.fio.runtime}s",
            "x" + str(self.repetitions),
        )


SETTABLE = settings.settable(WorkloadScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
