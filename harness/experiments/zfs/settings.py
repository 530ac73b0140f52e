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
    media = "none"                 # the data disks behave like: none | hdd | ssd
    cache_media = "ssd"            # the cache and log disks (harness/vm/media.py)
    log = false                    # an extra disk as SLOG
    [fault]                        # faults/disk.py
    kind = "wipe"                  # zero | zero-percent | bitflip | wipe | detach
    disks = [1]
    when = "running"               # or "offline": pool exported, guest stopped, re-imported
    [sweep]                        # optional: the cross product, each cell ``repeat`` times
    fill = [25, 50, 75]
    layout = ["mirror", "raidz1"]

``experiment = "crash"`` (multi-disk crash states, harness/experiments/zfs/crash.py) takes no
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

import itertools
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from faults.disk import LABEL_BYTES, DiskFault, FaultKind, When
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.settings import Settings, Size, parse_size, problem
from harness.experiments.zfs.cells import (
    DEFAULT_ASHIFT,
    DEFAULT_RECORDSIZE,
    DRAID_LAYOUTS,
    SEQUENTIAL_LAYOUTS,
    Cell,
    Layout,
    PoolSpec,
)
from harness.vm.media import Media

MiB = 1 << 20
# ZFS refuses vdevs under 64 MiB; the labels and metaslabs want some room besides.
MIN_DISK = 64 * MiB
MAX_FILL = 95.0
DEFAULT_TIMEOUT = 1800.0
TORN_MODELS = ("honest", "any")  # harness/replay/honest.py


class Experiment(StrEnum):
    SCRUB = "scrub"
    RESILVER = "resilver"
    CRASH = "crash"


# Field resilvers run under load: 4 KiB random reads and writes on the pool, rate-limited
# so the scan still finishes; the harness stops it when the scan ends.
DEFAULT_LOAD_JOB = """[load]
directory=/tank
filename=load
size=64M
rw=randrw
bs=4k
rate_iops=200
time_based=1
runtime=86400
"""


def _fill(v: float) -> float:
    if not 0 < v <= MAX_FILL:
        raise problem(
            f"fill is a percentage of usable capacity in (0, {MAX_FILL:g}]",
            "ZFS keeps ~3% slop space and slows down badly when nearly full",
        )
    return v


Fill = Annotated[float, AfterValidator(_fill), Field(description="% of usable capacity")]
Offset = Annotated[int, BeforeValidator(lambda v: 0 if v in (0, "0") else parse_size(v))]


class FaultSpec(Settings):
    """``[fault]``: what happens to the disks (faults/disk.py)."""

    kind: FaultKind | None = Field(None, description="default: wipe (resilver), zero-percent")
    disks: tuple[int, ...] = Field((0,), min_length=1, description="indexes of data disks")
    when: When = When.RUNNING
    offset: Offset = 0
    length: Offset = 0
    percent: float = Field(50.0, gt=0, le=100)
    labels: bool = False
    count: int = Field(1000, ge=1)


class CrashSpec(Settings):
    """``[crash]``: the workload and the crash states of a ``crash`` experiment."""

    rounds: int = Field(4, ge=1)
    files: int = Field(12, ge=1)
    max_size: Size = 256 * 1024
    ops: int = Field(6, ge=1)
    consistent: bool = True
    torn_per_interval: int = Field(4, ge=0)
    torn_max_states: int = Field(32, ge=1)
    points: Literal["flush", "entry"] = "flush"
    torn_model: Literal["honest", "any"] = "honest"
    guest_batch: int = Field(4, ge=1)
    zdb: bool = Field(True, description="zdb -e -bcc of every state's images on the host too")

    @model_validator(mode="after")
    def _some_states(self) -> CrashSpec:
        if not 512 <= self.max_size <= 64 * MiB:
            raise problem("must be from 512B to 64M", key="max_size")
        if not self.consistent and not self.torn_per_interval:
            raise problem("no crash states", "set crash.torn_per_interval > 0", key="consistent")
        return self

    def state_specs(self) -> list[dict[str, object]]:
        """For harness.replay.multicrash.generate."""
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
        return self.model_dump(mode="json")


class SweepSpec(Settings):
    """``[sweep]``: the cross product of these, each cell ``repeat`` times (seed 003's
    factors: RAID level, fill, stripe width, an SSD cache; and the pool's own knobs)."""

    fill: tuple[Fill, ...] = ()
    layout: tuple[Layout, ...] = ()
    disks: tuple[Annotated[int, Field(ge=1)], ...] = Field((), description="stripe width")
    recordsize: tuple[Size, ...] = ()
    ashift: tuple[Annotated[int, Field(ge=9, le=16)], ...] = ()
    cache: tuple[bool, ...] = Field((), description="with / without an L2ARC disk")
    log: tuple[bool, ...] = Field((), description="with / without a SLOG disk")
    load: tuple[bool, ...] = Field((), description="with / without the fio load during the scan")
    media: tuple[Media, ...] = Field((), description="the data disks as HDDs, SSDs, or none")


class ZfsScenario(ScenarioBase):
    """A ZFS scenario (``kind = "zfs"``): scrub, resilver or pool crash states."""

    kind: Literal["zfs"]
    not_stored: ClassVar[frozenset[str]] = frozenset({"fault_spec", "crash"})
    experiment: Experiment = Experiment.RESILVER
    layout: Layout = Layout.RAIDZ1
    disks: int = Field(4, ge=1, description="data disks; spares for a resilver come on top")
    disk_size: Size = 256 * MiB
    fill: Fill = 50.0
    repeat: int = Field(1, ge=1, description="repetitions, each in fresh guests")
    progress_interval: float = Field(
        1.0, ge=0, description="seconds between zpool status samples during a scan (0: off)"
    )
    sequential: bool = Field(
        False, description="resilver by sequential rebuild (zpool replace -s; mirror, dRAID)"
    )
    load: bool = Field(False, description="run load_job (fio) on the pool during the scan")
    load_job: str = Field(DEFAULT_LOAD_JOB, description="the fio job of the background load")
    fill_once: bool = Field(
        True,
        description="fill each cell once; every repetition starts from overlays on its disks",
    )
    keep_guest: bool = Field(
        True,
        description="with fill_once: the fills and repetitions share one guest, their disks"
        " plugged in and out of it, instead of a boot each",
    )
    ashift: int = Field(DEFAULT_ASHIFT, ge=9, le=16, description="9 (512 B) to 16 (64 KiB)")
    recordsize: Size = DEFAULT_RECORDSIZE
    cache: bool = Field(False, description="an extra disk as L2ARC")
    log: bool = Field(False, description="an extra disk as SLOG")
    media: Media = Field(
        Media.NONE, description="what the data disks behave like: none, hdd or ssd (rates)"
    )
    cache_media: Media = Field(Media.SSD, description="what the cache and log disks behave like")
    draid_spares: int = Field(
        0,
        ge=0,
        description="dRAID distributed spares (draidN:Ns); a resilver rebuilds onto them"
        " instead of a new disk",
    )
    timeout: float = Field(DEFAULT_TIMEOUT, gt=0, le=settings.MAX_SECONDS)
    memory_mb: int = Field(1024, ge=512)
    fault_spec: FaultSpec = Field(default_factory=FaultSpec, alias="fault")
    sweep: SweepSpec = Field(default_factory=SweepSpec)
    crash: CrashSpec | None = None

    model_config = settings.Settings.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _check(self) -> ZfsScenario:
        if self.disk_size < MIN_DISK:
            raise problem("ZFS needs disks of 64 MiB or more", key="disk_size")
        rs = self.recordsize
        if rs & (rs - 1) or not 512 <= rs <= 16 * MiB:
            raise problem("must be a power of 2, 512B..16M", key="recordsize")
        for lay in self.sweep.layout or (self.layout,):
            for n in self.sweep.disks or (self.disks,):
                if n < lay.min_disks():
                    raise problem(
                        f"{lay} needs at least {lay.min_disks()} disks, not {n}",
                        f"set disks = {lay.min_disks()} or more",
                        key="sweep.disks" if self.sweep.disks else "disks",
                    )
            if self.sequential and lay not in SEQUENTIAL_LAYOUTS:
                raise problem(
                    f"zpool replace -s (sequential rebuild) refuses {lay}: only mirrors and"
                    " dRAID rebuild sequentially",
                    "use layout mirror or draidN, or sequential = false",
                    key="sequential",
                )
        if self.sequential and self.experiment is not Experiment.RESILVER:
            raise problem("a sequential rebuild is a resilver", key="sequential")
        if self.draid_spares:
            _check_draid_spares(self)
        if not any(line.strip().startswith("[") for line in self.load_job.splitlines()):
            raise problem("a fio job needs at least one [section]", key="load_job")
        given = self.model_fields_set
        if self.experiment is Experiment.CRASH:
            for key in ("fault_spec", "sweep", "fill", "cache", "log"):
                if key in given:
                    name = key.removesuffix("_spec")
                    raise problem(f"a crash experiment takes no {name}", key=name)
            if self.crash is None:
                object.__setattr__(self, "crash", CrashSpec())
        elif self.crash is not None:
            raise problem("only experiment = 'crash' takes [crash]", key="crash")
        else:
            _check_fault(self)
        return self

    @property
    def pool(self) -> PoolSpec:
        return PoolSpec(
            self.layout,
            self.disks,
            self.disk_size,
            self.ashift,
            self.recordsize,
            self.cache,
            self.log,
            self.draid_spares,
        )

    @property
    def fault(self) -> DiskFault:
        f = self.fault_spec
        if self.experiment is Experiment.CRASH:
            # Never applied; it only keeps the record's shape.
            return DiskFault(FaultKind.ZERO_PERCENT, (0,), When.RUNNING, seed=self.seed)
        return DiskFault(
            _fault_kind(self),
            f.disks,
            f.when,
            f.offset,
            f.length,
            f.percent,
            f.labels,
            f.count,
            self.seed,
        )

    def cells(self) -> Iterator[Cell]:
        """The sweep's cross product (one cell without a sweep), fill varying fastest."""
        sw = self.sweep
        axes = itertools.product(
            sw.layout or (self.layout,),
            sw.disks or (self.disks,),
            sw.recordsize or (self.recordsize,),
            sw.ashift or (self.ashift,),
            sw.cache or (self.cache,),
            sw.log or (self.log,),
            sw.load or (self.load,),
            sw.media or (self.media,),
            sw.fill or (self.fill,),
        )
        for layout, disks, rs, ashift, cache, log, load, med, fill in axes:
            p = PoolSpec(
                Layout(layout),
                disks,
                self.disk_size,
                ashift,
                rs,
                cache,
                log,
                self.draid_spares,
                Media(med),
                self.cache_media,
            )
            yield Cell(p, float(fill), load)

    @property
    def experiment_kind(self) -> str:
        """The experiment kind that runs this scenario (harness/experiments/zfs/)."""
        return "zfs-crash" if self.experiment is Experiment.CRASH else "zfs-scan"

    def catalogue_row(self) -> tuple[str, str, str, str]:
        p = self.pool
        return (
            "zfs",
            f"{p.layout} x{p.disks}",
            f"fill {self.fill:g}%",
            f"{self.experiment}: {self.fault.kind}",
        )

    def resolved(self) -> dict[str, Any]:
        out = super().resolved()
        out["fault"] = self.fault.to_json()
        out["sweep"] = {k: v for k, v in out["sweep"].items() if v}
        if self.crash is not None:
            out["crash"] = self.crash.to_json()
        return out


def _fault_kind(sc: ZfsScenario) -> FaultKind:
    if sc.fault_spec.kind is not None:
        return sc.fault_spec.kind
    return FaultKind.WIPE if sc.experiment is Experiment.RESILVER else FaultKind.ZERO_PERCENT


def _check_draid_spares(sc: ZfsScenario) -> None:
    """Distributed spares: dRAID only, one per lost disk, and room left for the data."""
    for lay in sc.sweep.layout or (sc.layout,):
        if lay not in DRAID_LAYOUTS:
            raise problem(
                f"only dRAID has distributed spares, not {lay}",
                "use layout draid1..3, or draid_spares = 0",
                key="draid_spares",
            )
        for n in sc.sweep.disks or (sc.disks,):
            if n - sc.draid_spares < lay.parity + 1:
                raise problem(
                    f"{lay} on {n} disks with {sc.draid_spares} distributed spares leaves"
                    " no room for data",
                    f"use {lay.parity + 1 + sc.draid_spares} disks or more",
                    key="draid_spares",
                )
    if sc.experiment is Experiment.RESILVER and sc.draid_spares < len(sc.fault_spec.disks):
        raise problem(
            f"{len(sc.fault_spec.disks)} lost disks need as many distributed spares",
            key="draid_spares",
        )


def _check_fault(sc: ZfsScenario) -> None:
    f, kind = sc.fault_spec, _fault_kind(sc)
    if sc.experiment is Experiment.RESILVER and kind not in (FaultKind.WIPE, FaultKind.DETACH):
        raise problem(
            "a resilver needs a lost disk", "use kind = 'wipe' or 'detach'", key="fault.kind"
        )
    if sc.experiment is Experiment.SCRUB and kind in (FaultKind.WIPE, FaultKind.DETACH):
        raise problem(
            "a scrub experiment damages data in place",
            "use experiment = 'resilver' to lose a disk",
            key="fault.kind",
        )
    if not all(0 <= i < sc.disks for i in f.disks):
        raise problem(f"expected disk indexes from 0 to {sc.disks - 1}", key="fault.disks")
    if len(set(f.disks)) != len(f.disks):
        raise problem("a disk is listed twice", key="fault.disks")
    if kind is FaultKind.ZERO and (f.length <= 0 or f.offset + f.length > sc.disk_size):
        raise problem(
            f"the range must be non-empty and within {sc.disk_size} B", key="fault.length"
        )
    if (
        kind is FaultKind.ZERO
        and not f.labels
        and (f.offset < LABEL_BYTES or f.offset + f.length > sc.disk_size - LABEL_BYTES)
    ):
        raise problem(
            "the range overlaps the ZFS labels (first and last 512 KiB)",
            "set labels = true to allow it",
            key="fault.offset",
        )


SETTABLE = settings.settable(ZfsScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
SETTABLE = {
    ("fault." + k[len("fault_spec.") :] if k.startswith("fault_spec.") else k): v
    for k, v in SETTABLE.items()
}
ALIASES = {"fault": "fault.kind"}
