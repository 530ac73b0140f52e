"""What the lab needs from a virtual machine, independent of how it is started: the
disks, the guest's spec, and the ``Guest`` and ``Backend`` protocols.

The backends (``harness.vm.qemu``, ``harness.vm.libvirt``) implement these and import
only this module; ``harness.vm.backend`` chooses one. Kept apart from the chooser so
that no backend imports the module that imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from harness.vm.agent import ExecResult

if TYPE_CHECKING:
    from harness.image.build import Image

# Spare root ports for a guest that will take disks by hotplug: a few is what a caller
# usually wants (``GuestSpec(hotplug_ports=HOTPLUG_PORTS)``).
HOTPLUG_PORTS = 4


@dataclass(frozen=True)
class Disk:
    """A disk for the guest. The guest finds it as /dev/disk/by-id/virtio-<serial>."""

    path: Path
    serial: str
    format: str = "raw"
    readonly: bool = False
    # Writes go to a throw-away overlay: the file on the host is never changed.
    snapshot: bool = False
    # QEMU's own write logger (block driver blklogwrites): every write the guest makes to
    # this disk is also logged, in dm-log-writes format, to this file.
    blklogwrites: Path | None = None
    # A raw disk through the host's page cache: for a disk no crash state is taken from
    # and that the host reads back at once (a ZFS fill, exported, then copied).
    host_cache: bool = False
    # What the disk behaves like (harness/vm/media.py): its rates capped like a 7,200-rpm
    # HDD's or a SATA SSD's; "none": the host file as fast as it goes.
    media: str = "none"

    @property
    def direct(self) -> bool:
        """Opened O_DIRECT on the host (QEMU ``cache.direct=on``, libvirt
        ``cache='none'``): a completed guest write is in the file, which is what a crash
        (kill) leaves. Raw disks are, unless ``host_cache``; overlays are throw-away."""
        return self.format == "raw" and not self.snapshot and not self.host_cache


@dataclass(frozen=True)
class GuestSpec:
    disks: Sequence[Disk] = ()
    memory_mb: int = 1024
    cpus: int = 2
    udev: bool = False
    boot_timeout: float = 180.0
    command_timeout: float = 300.0
    # Where the console log and sockets go; a temporary directory if None.
    workdir: Path | None = None
    extra_cmdline: Sequence[str] = field(default_factory=tuple)
    # Spare PCIe root ports for disks plugged while the guest runs (``attach_disk``): the
    # root bus, where the boot-time disks sit, has no hotplug on q35. One disk each. None
    # unless asked for: a guest that plugs nothing is the same machine as before hotplug
    # existed, so its measurements compare with older runs' (a 4-port guest's I/O bench
    # was 3.5 % slower by the median, within the noise, but not shown to be equal).
    hotplug_ports: int = 0


class Guest(Protocol):
    console_log: Path
    accelerator: str

    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> ExecResult: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def read_file(self, path: str) -> bytes: ...

    def disk(self, serial: str) -> str: ...

    def attach_disk(self, disk: Disk, *, timeout: float = 60.0) -> str:
        """Hot-plug ``disk`` into the running guest (raw or qcow2, read-only or not; not
        ``snapshot`` nor ``blklogwrites``); returns its path there, ``disk(serial)``.

        :raise InputError: a bad or already used serial, an option hotplug cannot do.
        :raise HarnessError: the file is missing, no free hotplug port, the VM refused.
        :raise GuestTimeout: the guest did not see the disk within ``timeout``.
        """

    def detach_disk(self, serial: str, *, timeout: float = 60.0) -> None:
        """Unplug a disk ``attach_disk`` added; returns once the guest has let it go.

        :raise InputError: ``serial`` is not a hot-plugged disk of this guest.
        :raise GuestTimeout: the guest did not release it within ``timeout``.
        """

    def attach_disks(self, disks: Sequence[Disk], *, timeout: float = 60.0) -> list[str]:
        """``attach_disk`` of several disks, waiting for the guest once."""

    def detach_disks(self, serials: Sequence[str], *, timeout: float = 60.0) -> None:
        """``detach_disk`` of several disks, all asked for before waiting for any."""

    def boot_seconds(self) -> float: ...

    def kill(self) -> None:
        """A real crash: stop the VM at once, nothing flushed (the disks are the state)."""


@dataclass(frozen=True)
class Machine:
    """What a backend's guests run on, as a run records it: the accelerator chosen where
    they run, and that host's QEMU."""

    accelerator: str  # kvm | tcg
    emulator: str


class Backend(Protocol):
    name: str

    def start(self, spec: GuestSpec) -> AbstractContextManager[Guest]: ...

    def machine(self, image: Image) -> Machine:
        """Probe where the guests will run (asked only by runs that boot one).

        :raise HarnessError: the emulator is missing or its host does not answer.
        """
