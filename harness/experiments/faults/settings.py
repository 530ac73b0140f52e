"""Runtime-fault scenarios (``kind = "faults"``): a device-mapper fault under a live
filesystem (``faults/dm.py``). ``experiment = "fsync-eio"``: what fsync reports when the
disk fails writes, per filesystem; ``"dust-scrub"``: dm-dust bad sectors under a ZFS
mirror (scrub repairs) and under ext4 (the read fails with EIO)
(``harness/experiments/faults/experiment.py``); ``"flakey-drop-remount"``: fstests' drop-and-remount
crash model at seeded sync points, cross-checked against crash replay
(``harness/experiments/faults/dropremount.py``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator

from faults.dm import FlakeyFault, FlakeyMode
from harness.config import settings
from harness.config.base import ScenarioBase
from harness.config.crash import Scenario as CrashScenario
from harness.config.settings import Settings, Size, problem
from harness.config.workloads import OpsWorkload


class FsCell(Settings):
    """One filesystem under the fault: how it is made and mounted."""

    type: Literal["ext2", "ext3", "ext4", "xfs", "btrfs", "zfs"]
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = Field((), description="zfs: the pool's failmode=...")
    label: str = Field("", description="name of the cell in tables (default: type + options)")

    def name(self) -> str:
        return self.label or " ".join([self.type, *self.mkfs_options, *self.mount_options])


class FlakeySpec(Settings):
    """``[fault]``: the dm-flakey mode switched on at the experiment's point (fsync-eio:
    after the first fsync; flakey-drop-remount: when the K-th sync returns)."""

    mode: FlakeyMode = FlakeyMode.ERROR_WRITES
    nth: int = Field(
        1, ge=1, description="corrupt_bio_byte: the bio's byte to overwrite (1 = first)"
    )
    direction: Literal["r", "w"] = Field("w", description="corrupt_bio_byte: reads or writes")
    value: int = Field(0, ge=0, le=255, description="corrupt_bio_byte: the byte written there")
    flags: tuple[Literal["meta", "sync", "fua", "preflush"], ...] = Field(
        (), description="corrupt_bio_byte: only bios with these flags (meta: REQ_META)"
    )
    up: int = Field(
        0,
        ge=0,
        description="fsync-eio: a flapping disk, healthy for up s then faulty for down s;"
        " fsync-1 falls in the first faulty window, fsync-2 in the next healthy one",
    )
    down: int = Field(0, ge=0, description="fsync-eio: seconds faulty of each up/down cycle")

    @model_validator(mode="after")
    def _interval(self) -> FlakeySpec:
        # dm-flakey needs both: up 0 is "always faulty" (a switched fault, the default),
        # down 0 "never faulty", which would measure nothing.
        if bool(self.up) != bool(self.down):
            raise problem(
                f"up = {self.up} and down = {self.down}: an interval needs both",
                "set both (e.g. up = 2, down = 1) for a flapping disk, or neither for a"
                " fault that holds from the switch on",
                key="down" if self.up else "up",
            )
        return self

    def fault(self) -> FlakeyFault:
        return FlakeyFault(
            self.mode, self.nth, self.direction, self.value, self.flags, self.up, self.down
        )


# Which switched modes each experiment can judge.
MODES: dict[str, tuple[FlakeyMode, ...]] = {
    "fsync-eio": (FlakeyMode.ERROR_WRITES, FlakeyMode.DROP_WRITES),
    "flakey-drop-remount": (FlakeyMode.DROP_WRITES, FlakeyMode.ERROR_WRITES, FlakeyMode.CORRUPT),
    "dust-scrub": tuple(FlakeyMode),  # dm-dust, not dm-flakey: the key is not used
}


DEFAULT_CELLS: tuple[dict[str, Any], ...] = (
    {"type": "ext4", "mount_options": ("errors=continue",)},
    {"type": "ext4", "mount_options": ("errors=remount-ro",)},
    {"type": "xfs"},
    {"type": "btrfs"},
    {"type": "zfs", "mount_options": ("failmode=continue",)},
)


class FaultsScenario(ScenarioBase):
    kind: Literal["faults"]
    experiment: Literal["fsync-eio", "dust-scrub", "flakey-drop-remount"] = "fsync-eio"
    filesystems: tuple[FsCell, ...] = Field(
        DEFAULT_CELLS,  # validated like any value
        min_length=1,
        validate_default=True,
    )
    disk_size: Size = Field(512 << 20, description="the disk under dm-flakey")
    fault: FlakeySpec = Field(default_factory=FlakeySpec)
    timeout: float = Field(
        60.0, gt=0, le=settings.MAX_SECONDS, description="seconds a blocked fsync is waited for"
    )
    data_mb: int = Field(48, ge=1, description="dust-scrub: MiB written before the fault")
    bad_blocks: int = Field(64, ge=1, description="dust-scrub: 4 KiB bad blocks on one side")
    layout: Literal["mirror", "raidz1", "raidz2"] = Field(
        "mirror", description="dust-scrub: the ZFS vdev (mirror: 2 disks, raidzN: N + 2)"
    )
    bad_disk: int = Field(0, ge=0, description="dust-scrub: the pool disk on dm-dust (0 = first)")
    workload: OpsWorkload = Field(
        default_factory=lambda: OpsWorkload(ops=60),
        description="flakey-drop-remount: the seeded op workload (harness/guest/opgen.py)",
    )
    drops: int = Field(
        3, ge=1, description="flakey-drop-remount: sync points per filesystem (seeded draw)"
    )
    drop_at: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (), description="flakey-drop-remount: these sync points (1 = first fsync), not drawn"
    )
    cross_check: bool = Field(
        True,
        description="flakey-drop-remount: replay the dm-log-writes state at each drop point too",
    )

    @model_validator(mode="after")
    def _drop_remount_cells(self) -> FaultsScenario:
        modes = MODES[self.experiment]
        if self.fault.up and self.experiment != "fsync-eio":
            # A fault that comes and goes is no crash model (drop-remount) and leaves
            # dm-dust's bad blocks alone: only fsync-eio measures a flapping disk.
            raise problem(
                f"{self.experiment} needs a fault that holds: up/down intervals are for fsync-eio",
                "remove fault.up and fault.down",
                key="fault.up",
            )
        if self.fault.mode not in modes:
            raise problem(
                f"{self.experiment} cannot switch on {self.fault.mode}",
                "use " + " or ".join(str(m) for m in modes),
                key="fault.mode",
            )
        if self.bad_disk >= self.pool_disks:
            raise problem(
                f"the {self.layout} pool has disks 0 to {self.pool_disks - 1}: there is no "
                f"disk {self.bad_disk}",
                f"set bad_disk to 0..{self.pool_disks - 1}",
                key="bad_disk",
            )
        if self.experiment != "flakey-drop-remount":
            return self
        for i, cell in enumerate(self.filesystems):
            try:
                self.replay_twin(cell, self.seed)
            except ValidationError as e:
                err = e.errors()[0]
                loc = [str(p) for p in err["loc"] if p not in ("ops",)]
                key = (err.get("ctx") or {}).get("key") or ".".join(loc)
                if key.startswith("fs.") or key == "fs":
                    key = f"filesystems[{i}]" + key.removeprefix("fs").replace(
                        "data_mode", "mount_options"
                    )
                raise problem(
                    f"flakey-drop-remount replays {cell.name()!r} as a crash scenario: "
                    + str(err["msg"]).removeprefix("Value error, "),
                    (err.get("ctx") or {}).get("hint")
                    or "use ext2/ext3/ext4/xfs/btrfs (ZFS has its own crash states: zfs-crash-*)",
                    key=key,
                ) from None
        return self

    def replay_twin(self, cell: FsCell, seed: int) -> CrashScenario:
        """The crash-replay scenario of one cell: the same filesystem, workload and seed,
        cut at every mark (``harness/experiments/faults/dropremount.py`` cross-checks with it).

        :raise ValidationError: the cell or the workload is no valid crash scenario.
        """
        data = [o.removeprefix("data=") for o in cell.mount_options if o.startswith("data=")]
        fs = {
            "type": cell.type,
            "mkfs_options": cell.mkfs_options,
            "mount_options": [o for o in cell.mount_options if not o.startswith("data=")],
            "disk_size": self.disk_size,
            **({"data_mode": data[-1]} if data else {}),
        }
        return CrashScenario.model_validate(
            {
                "name": f"{self.name}/{cell.name()}",
                "path": self.path,
                "description": self.description,
                "seed": seed,
                "expect": self.expect,
                "fs": fs,
                "workload": self.workload.model_dump(),
                "crash": {"states": [{"kind": "mark"}], "max_states": 1 << 20},
                "check": {"timeout": max(self.timeout, 300.0)},
            }
        )

    @property
    def pool_disks(self) -> int:
        """dust-scrub: how many disks the ZFS vdev takes."""
        return 2 if self.layout == "mirror" else int(self.layout[-1]) + 2

    def kernel_modules(self) -> tuple[str, ...]:
        return ("zfs",) if any(c.type == "zfs" for c in self.filesystems) else ()

    def catalogue_row(self) -> tuple[str, str, str, str]:
        return (
            ",".join(dict.fromkeys(f.type for f in self.filesystems)),
            str(self.fault.mode),
            self.experiment,
            f"{len(self.filesystems)} filesystems",
        )

    @property
    def experiment_kind(self) -> str:
        return self.experiment


SETTABLE = settings.settable(FaultsScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
