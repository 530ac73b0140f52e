"""What the lab needs from a virtual machine, independent of how it is started.

Direct QEMU (``harness.qemu``) is the only backend today; a libvirt backend can implement
the same two types. Callers use ``start_guest()`` and a ``Guest``; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.vm.agent import ExecResult


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

    def boot_seconds(self) -> float: ...

    def kill(self) -> None:
        """A real crash: stop the VM at once, nothing flushed (the disks are the state)."""


class Backend(Protocol):
    name: str

    def start(self, spec: GuestSpec) -> AbstractContextManager[Guest]: ...


def start_guest(spec: GuestSpec) -> AbstractContextManager[Guest]:
    """Boot a fresh disposable guest with the default backend (direct QEMU)."""
    from harness.vm.qemu import QemuBackend

    return QemuBackend().start(spec)
