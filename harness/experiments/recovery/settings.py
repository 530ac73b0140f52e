"""Recovery-time scenarios (``kind = "recovery"``): how long a filesystem takes to come back
after a real crash, against its size, its population and its mkfs features
(``harness/experiments/recovery/experiment.py``; seeds 002 and 004).

A cell is a filesystem made one way (``features`` are ``mkfs.ext* -O`` flags, ``journal_size``
its ``-J size=``) and mounted one way; the run is every cell x every size x ``repeat``. The
population (files, directories, their sizes, a fill by fallocate) is the same for every
cell, seeded, and must fit the smallest size.

What only the host can tell -- free space in the work directory, whether this e2fsprogs
knows a feature -- is checked by ``preflight`` before any guest boots.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from harness import filesystems, paths, proc
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.crash import MIN_DISK, FsType
from harness.config.settings import Settings, Size, problem, size_text
from harness.errors import InputError

MiB = 1 << 20
EXT = ("ext2", "ext3", "ext4")
# mke2fs's default bytes per inode for filesystems of 512 MiB and more (mke2fs.conf).
INODE_RATIO = 16384
# Room a population may take of the smallest size: the rest is metadata, journal and
# the churn that runs when the guest is killed.
FIT = 0.85


class Cell(Settings):
    """One way to make and mount the filesystem."""

    fs: FsType
    features: tuple[str, ...] = Field(
        (), description="mkfs.ext* -O flags, e.g. ['^flex_bg'] or ['^metadata_csum', '^uninit_bg']"
    )
    journal_size: Size | None = Field(None, description="ext3/ext4: mke2fs -J size= (4M-1G)")
    mount_options: tuple[str, ...] = ()
    label: str = Field("", description="name of the cell in tables (default: fs + features)")

    @model_validator(mode="after")
    def _ext_only(self) -> Cell:
        if self.features and self.fs not in EXT:
            raise problem(
                f"features are mkfs.ext* -O flags; {self.fs} has none here",
                key="features",
                hint="leave features empty for filesystems other than ext*",
            )
        if self.journal_size is not None:
            if self.fs not in ("ext3", "ext4"):
                raise problem(f"{self.fs} has no journal to size", key="journal_size")
            if not 1 * MiB <= self.journal_size <= 10240 * MiB:
                raise problem("mke2fs takes a journal of 1M to 10G", key="journal_size")
        return self

    def feature_text(self) -> str:
        """What the table calls this cell's mkfs features."""
        parts = [",".join(self.features) or "defaults"]
        if self.journal_size is not None:
            parts.append(f"journal={size_text(self.journal_size)}")
        return " ".join(parts)

    def name(self) -> str:
        return self.label or f"{self.fs} {self.feature_text()}" + "".join(
            f" {o}" for o in self.mount_options
        )

    def mkfs_argv(self) -> list[str]:
        """``mkfs.<fs>`` and its options, without the device."""
        argv = list(filesystems.get(self.fs).mkfs)
        if self.features:
            argv += ["-O", ",".join(self.features)]
        if self.journal_size is not None:
            argv += ["-J", f"size={self.journal_size // MiB}"]
        return argv


class Population(Settings):
    """What is on the filesystem when the guest is killed (seeded, the same per cell)."""

    files: int = Field(2000, ge=0, description="small files, spread over the directories")
    dirs: int = Field(50, ge=1, description="directories (a two-level tree)")
    file_size: Size = Field(8192, description="small files are 1 byte to this many")
    fill: float = Field(
        0.0, ge=0, le=80, description="percent of the size taken by fallocated files (not ext2/3)"
    )

    def bytes_needed(self, size: int) -> int:
        """Blocks the population takes at most on a filesystem of ``size`` (4 KiB blocks)."""
        per_file = -(-self.file_size // 4096) * 4096
        return int(self.fill / 100 * size) + self.files * per_file + self.dirs * 4096


# How the crash state is made: ``sigkill`` kills QEMU while the churn runs (the disk image
# holds every write QEMU completed); ``dm-log-writes`` records the same population and
# churn through dm-log-writes in the same guest and replays the log on the host up to a
# mark taken at the same moment (every write completed before the mark).
METHODS = ("sigkill", "dm-log-writes")
Method = Literal["sigkill", "dm-log-writes"]


class Crash(Settings):
    """``[crash]``: the metadata-heavy workload running when the crash state is taken."""

    after: float = Field(4.0, gt=0, description="seconds of churn before the kill")
    fsync_every: int = Field(25, ge=1, description="the churn fsyncs a file every N operations")
    methods: tuple[Method, ...] = Field(
        ("sigkill",),
        min_length=1,
        description="crash states to make of each item: sigkill (QEMU killed), dm-log-writes"
        " (the same churn logged, replayed to a mark on the host)",
    )

    @field_validator("methods")
    @classmethod
    def _once(cls, methods: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(m for m in METHODS if m in methods)  # each once, in a fixed order


class RecoveryScenario(ScenarioBase):
    kind: Literal["recovery"]
    filesystems: tuple[Cell, ...] = Field(
        ({"fs": "ext2"}, {"fs": "ext4"}, {"fs": "xfs"}), min_length=1, validate_default=True
    )
    sizes: tuple[Size, ...] = Field(
        (1 << 30, 4 << 30, 16 << 30), min_length=1, description="sparse disk image sizes"
    )
    repeat: int = Field(1, ge=1)
    population: Population = Field(default_factory=Population)
    crash: Crash = Field(default_factory=Crash)
    timeout: float = Field(
        1800.0, gt=0, le=settings.MAX_SECONDS, description="seconds any one step may take"
    )

    @field_validator("sizes")
    @classmethod
    def _sorted(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(set(sizes)))

    @model_validator(mode="after")
    def _fits(self) -> RecoveryScenario:
        small = self.sizes[0]
        for i, cell in enumerate(self.filesystems):
            if small < MIN_DISK[cell.fs]:
                raise problem(
                    f"{size_text(small)} is below what mkfs.{cell.fs} accepts",
                    key="sizes",
                    hint=f"at least {size_text(MIN_DISK[cell.fs])}",
                )
            if self.population.fill and cell.fs in ("ext2", "ext3"):
                raise problem(
                    f"{cell.fs} has no fallocate: a fill would write every byte under TCG",
                    key="population.fill",
                    hint=f"set fill = 0, or drop filesystems[{i}]",
                )
        need = self.population.bytes_needed(small)
        if need > FIT * small:
            raise problem(
                f"the population needs about {need / MiB:.0f} MiB, more than"
                f" {FIT:.0%} of the smallest size {size_text(small)}",
                key="population",
                hint="fewer or smaller files, a lower fill, or larger sizes",
            )
        inodes = small // INODE_RATIO
        if self.population.files + self.population.dirs > inodes // 2:
            raise problem(
                f"{self.population.files} files and {self.population.dirs} dirs need more than"
                f" half the {inodes} inodes ext gets at {size_text(small)}",
                key="population.files",
                hint="fewer files, or larger sizes",
            )
        return self

    def fs_types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.fs for c in self.filesystems))

    def catalogue_row(self) -> tuple[str, str, str, str]:
        return (
            ",".join(dict.fromkeys(c.fs for c in self.filesystems)),
            f"{len(self.filesystems)} cells",
            f"{self.population.files} files",
            " ".join(size_text(z) for z in self.sizes),
        )


SETTABLE = settings.settable(RecoveryScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)


def preflight(sc: RecoveryScenario) -> None:
    """Bad input only the host can tell, before any guest boots: room for the largest
    image in the work directory, and every ext cell's mkfs options accepted by mke2fs
    (``-n``: nothing is written; host and guest image are both Debian 12's e2fsprogs).

    :raise InputError: naming the file, the key and the value.
    """
    work = paths.work_dir()
    free = shutil.disk_usage(work).free
    big = sc.sizes[-1]
    # A sparse image needs room for what mkfs, the population and a repair copy write;
    # a size above the free space cannot be promised at all.
    if big > free:
        raise InputError(
            f"{sc.path}: key 'sizes' = {_human(big)!r}: larger than the"
            f" {free / (1 << 30):.1f} GiB free in the work directory {work}",
            hint="set CRASHLAB_WORK to a larger filesystem, or use smaller sizes",
        )
    with tempfile.TemporaryDirectory(dir=work) as d:
        img = Path(d) / "probe.img"
        with open(img, "wb") as f:
            f.truncate(sc.sizes[0])
        for i, cell in enumerate(sc.filesystems):
            if cell.fs not in EXT:
                continue
            r = proc.run([*cell.mkfs_argv(), "-n", img], check=False)
            if r.returncode != 0:
                why = (r.stderr or r.stdout).strip().splitlines()
                journal = cell.journal_size is not None and (
                    not cell.features or "journal" in (r.stderr + r.stdout).lower()
                )
                key = "journal_size" if journal else "features"
                value = size_text(cell.journal_size or 0) if journal else list(cell.features)
                raise InputError(
                    f"{sc.path}: key 'filesystems[{i}].{key}' = {value!r}:"
                    f" mkfs.{cell.fs} refuses it: {why[0] if why else r.returncode}",
                    hint="see man ext4(5) for the features this e2fsprogs knows",
                )


def _human(n: int) -> str:
    return f"{n >> 40}T" if n >= 1 << 40 and n % (1 << 40) == 0 else size_text(n)
