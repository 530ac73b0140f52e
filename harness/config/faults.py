"""Runtime-fault scenarios (``kind = "faults"``): a device-mapper fault under a live
filesystem (``faults/dm.py``). ``experiment = "fsync-eio"``: what fsync reports when the
disk fails writes, per filesystem; ``"dust-scrub"``: dm-dust bad sectors under a ZFS
mirror (scrub repairs) and under ext4 (the read fails with EIO)
(``harness/experiments/faults.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from faults.dm import FlakeyFault, FlakeyMode
from harness import paths
from harness.config import settings
from harness.config.settings import Settings, Size, problem


class FsCell(Settings):
    """One filesystem under the fault: how it is made and mounted."""

    type: Literal["ext2", "ext3", "ext4", "xfs", "btrfs", "zfs"]
    mkfs_options: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = Field((), description="zfs: the pool's failmode=...")
    label: str = Field("", description="name of the cell in tables (default: type + options)")

    def name(self) -> str:
        return self.label or " ".join([self.type, *self.mkfs_options, *self.mount_options])


class FlakeySpec(Settings):
    """``[fault]``: the dm-flakey mode switched on after the first fsync."""

    mode: FlakeyMode = FlakeyMode.ERROR_WRITES

    @field_validator("mode")
    @classmethod
    def _switched(cls, mode: FlakeyMode) -> FlakeyMode:
        if mode not in (FlakeyMode.ERROR_WRITES, FlakeyMode.DROP_WRITES):
            raise problem("fsync-eio switches writes off: error_writes or drop_writes")
        return mode

    def fault(self) -> FlakeyFault:
        return FlakeyFault(self.mode)


DEFAULT_CELLS: tuple[dict[str, Any], ...] = (
    {"type": "ext4", "mount_options": ("errors=continue",)},
    {"type": "ext4", "mount_options": ("errors=remount-ro",)},
    {"type": "xfs"},
    {"type": "btrfs"},
    {"type": "zfs", "mount_options": ("failmode=continue",)},
)


class FaultsScenario(Settings):
    name: str
    path: Path
    description: str
    kind: Literal["faults"]
    experiment: Literal["fsync-eio", "dust-scrub"] = "fsync-eio"
    seed: int = 1
    expect: Literal["findings", "clean"] | None = None
    filesystems: tuple[FsCell, ...] = Field(
        DEFAULT_CELLS,  # validated like any value
        min_length=1,
        validate_default=True,
    )
    disk_size: Size = Field(512 << 20, description="the disk under dm-flakey")
    fault: FlakeySpec = Field(default_factory=FlakeySpec)
    timeout: float = Field(60.0, gt=0, description="seconds a blocked fsync is waited for")
    data_mb: int = Field(48, ge=1, description="dust-scrub: MiB written before the fault")
    bad_blocks: int = Field(64, ge=1, description="dust-scrub: 4 KiB bad blocks on one side")
    extends: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()

    @property
    def experiment_kind(self) -> str:
        return self.experiment

    def resolved(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude={"path"})
        out["path"] = paths.portable(self.path)
        return out


SETTABLE = settings.settable(FaultsScenario)
for _k in ("name", "path", "extends", "overrides", "kind"):
    SETTABLE.pop(_k, None)
