"""The direct-QEMU backend: one disposable guest per ``with`` block.

The guest's life is a stack on one ExitStack: a work directory, the QEMU process, the QMP
connection, the guest-agent channel. Whatever fails, the stack unwinds: the guest syncs,
QMP ``quit``, then SIGKILL. What every backend shares (the agent, console scanning, the
boot retry) is in ``harness.vm.guest``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from harness import proc
from harness.errors import GuestAgentError, GuestBootFailed, GuestError, GuestTimeout, HarnessError
from harness.image.build import Image, require_image
from harness.vm import accel, console, media
from harness.vm.agent import Agent
from harness.vm.base import Disk, GuestSpec, Machine
from harness.vm.guest import AgentGuest, boot, kernel_cmdline, workdir_for


def qemu_argv(image: Image, spec: GuestSpec, accelerator: str, workdir: Path) -> list[str]:
    argv = accel.machine_argv(
        accelerator,
        image.kernel,
        image.initrd,
        kernel_cmdline(spec),
        workdir / "console.log",
        memory_mb=spec.memory_mb,
        cpus=spec.cpus,
    )
    argv += [
        # Relative: QEMU runs in the work directory, whose path may be longer than a
        # socket's name can be (see SockDir).
        "-qmp",
        "unix:qmp.sock,server=on,wait=off",
        "-chardev",
        "socket,id=qga,path=qga.sock,server=on,wait=off",
        "-device",
        "virtio-serial-pci,id=vser",
        "-device",
        "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
        "-device",
        "virtio-rng-pci",
        # The root disk comes first so the guest names it vda; writes go to an overlay.
        "-drive",
        f"if=none,id=root,file={image.rootfs},format=qcow2,snapshot=on",
        "-device",
        "virtio-blk-pci,drive=root,serial=crashlab-root",
    ]
    for i, d in enumerate(spec.disks):
        if d.blklogwrites is not None:
            argv += _blklogwrites_args(i, d)
            continue
        opts = [
            "if=none",
            f"id=d{i}",
            f"file={d.path}",
            f"format={d.format}",
            "cache.direct=on" if d.direct else "cache=writeback",
            "aio=threads",
        ]
        if d.readonly:
            opts.append("readonly=on")
        if d.snapshot:
            opts.append("snapshot=on")
        if caps := media.limits(d.media):
            opts += [f"throttling.iops-total={caps.iops}", f"throttling.bps-total={caps.bps}"]
        slot = _slot(i, argv)  # may add a bridge to argv first
        argv += ["-drive", ",".join(opts)]
        argv += ["-device", f"virtio-blk-pci,drive=d{i},serial={d.serial}{slot}"]
    # Last, so they take the next free slots and every disk above keeps its address.
    # Each port needs a chassis number of its own.
    for n in range(spec.hotplug_ports):
        argv += ["-device", f"pcie-root-port,id=hp{n},bus=pcie.0,chassis={n + 1}"]
    return argv


# The root bus has 32 slots and the machine uses a few: disks past the first ones go
# behind PCIe-to-PCI bridges (31 slots each), so one guest can take a large check batch.
_ROOT_BUS_DISKS = 20


def _slot(i: int, argv: list[str]) -> str:
    if i < _ROOT_BUS_DISKS:
        return ""
    bridge, slot = divmod(i - _ROOT_BUS_DISKS, 31)
    if slot == 0:
        argv += ["-device", f"pcie-pci-bridge,id=br{bridge},bus=pcie.0"]
    return f",bus=br{bridge},addr={slot + 1:#x}"


def _blklogwrites_args(i: int, d: Disk) -> list[str]:
    """A raw disk under QEMU's blklogwrites filter, logging to ``d.blklogwrites``."""
    return [
        "-blockdev",
        f"driver=file,node-name=f{i},filename={d.path},cache.direct=on",
        "-blockdev",
        f"driver=file,node-name=l{i},filename={d.blklogwrites},cache.direct=on",
        "-blockdev",
        f"driver=blklogwrites,node-name=d{i},file=f{i},log=l{i},log-sector-size=512",
        "-device",
        f"virtio-blk-pci,drive=d{i},serial={d.serial}",
    ]


# A unix socket's name holds 107 bytes (sun_path). A work directory under a long TMPDIR
# (pytest's under xdist, a lab host of tests/netlab.py) left QEMU exiting with "Path must
# be less than 108 bytes".
SUN_PATH = 107


class SockDir:
    """The work directory's sockets by names that fit: the path itself when short enough,
    else the same file through this process's descriptor of the directory
    (``/proc/self/fd/N/qga.sock``), held as long as the guest lives."""

    def __init__(self, workdir: Path, stack: contextlib.ExitStack):
        self.workdir = workdir
        self._fd: int | None = None
        if len(str(workdir / "qmp.sock")) > SUN_PATH:
            self._fd = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
            stack.callback(os.close, self._fd)

    def name(self, sock: str) -> str:
        return str(self.workdir / sock) if self._fd is None else f"/proc/self/fd/{self._fd}/{sock}"


class QemuGuest(AgentGuest):
    def __init__(self, image: Image, spec: GuestSpec, accelerator: str, workdir: Path):
        self._children = contextlib.ExitStack()
        self.socks = SockDir(workdir, self._children)
        agent = Agent(Path(self.socks.name("qga.sock")))
        super().__init__(spec, accelerator, workdir / "console.log", agent)
        self.image = image
        self.workdir = workdir
        self.argv = qemu_argv(image, spec, accelerator, workdir)
        self.proc: proc.Child | None = None
        self._ports: dict[str, str] = {}  # serial -> the root port a hot-plugged disk is in

    # -- lifecycle ------------------------------------------------------------------------
    def launch(self) -> None:
        self._started = time.monotonic()
        # QEMU's own output goes to a file, not a pipe nobody drains while the guest runs.
        # die_with_parent: a harness killed by SIGKILL takes its guest with it (libvirt's
        # AUTODESTROY); an orphan would hold its disks' write locks against the rerun.
        # The launching thread is the guest's owner for its whole life (start_guest's
        # block), so the signal cannot come from a worker thread ending early.
        self.proc = self._children.enter_context(
            proc.spawn(
                self.argv, output=self.workdir / "qemu.out", die_with_parent=True, cwd=self.workdir
            )
        )
        self._wait_for_socket(self.workdir / "qga.sock", 10)
        # The socket file exists from QEMU's bind(), a moment before its listen(): a refused
        # connection (seen once in CI) is retried by _wait_for_agent, like a channel reset.
        with contextlib.suppress(GuestAgentError):
            self.agent.connect()
        self._wait_for_agent()

    def _wait_for_socket(self, path: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            self._check_alive("QEMU did not start")
            if time.monotonic() > deadline:
                raise GuestBootFailed(
                    "QEMU did not create its sockets", console=self._failure_text()
                )
            time.sleep(0.01)

    def _alive(self) -> bool:
        assert self.proc is not None
        return self.proc.alive()

    def _gone(self) -> str:
        """How QEMU ended, with its last word (why it would not start: a lock, an option)."""
        assert self.proc is not None
        said = self.proc.read_output().strip().splitlines()
        last = f": {said[-1][:300]}" if said else ""
        return f"QEMU exit status {self.proc.returncode}{last}"

    def _failure_text(self) -> str:
        out = self.proc.read_output() if self.proc is not None else ""
        return "\n".join(
            [
                "$ " + shlex.join(self.argv),
                out.strip()[-4000:],
                "--- console ---",
                console.tail(self.console_log),
            ]
        )

    def shutdown(self) -> None:
        """Sync the guest, then QMP quit, then kill. Always leaves no QEMU behind."""
        if self.proc is None or not self.proc.alive():
            self.agent.close()
            self._children.close()
            return
        if not self._hung:  # a hung guest would only spend the sync's 20 s not answering
            with contextlib.suppress(GuestError, OSError):
                self.agent.exec(["/bin/sync"], timeout=20)
        self.agent.close()
        with contextlib.suppress(Exception), self._monitor() as qmp:
            qmp.cmd("quit")
        # Asked to quit over QMP: give it 10 s to go by itself, then it is killed.
        self.proc.stop(10, terminate=False)
        self._children.close()

    def kill(self) -> None:
        """Pull the plug: SIGKILL QEMU while the guest runs. Nothing is synced or flushed by
        the guest; what QEMU had written to the disk images (``cache.direct=on`` for raw
        disks, so every completed guest write) is the crash state."""
        self.agent.close()
        if self.proc is not None:
            self.proc.kill()

    def qmp(self, command: str, **arguments: Any) -> Any:
        """One QMP command on a fresh connection (QMP is rarely needed; the agent is the
        command channel)."""
        with self._monitor() as qmp:
            return qmp.cmd(command, **arguments)

    def _monitor(self) -> AbstractContextManager[Any]:
        """A fresh QMP connection, closed at the block's end."""
        from qemu.qmp.legacy import QEMUMonitorProtocol

        qmp = QEMUMonitorProtocol(self.socks.name("qmp.sock"))
        qmp.connect()
        return contextlib.closing(qmp)

    # -- disk hotplug: a block node, then a virtio-blk device on a spare root port -----------
    def _plug(self, disk: Disk) -> None:
        from qemu.qmp import QMPError

        used = {self._ports[s] for s in self.hotplugged if s in self._ports}
        port = next(f"hp{n}" for n in range(self.spec.hotplug_ports) if f"hp{n}" not in used)
        node = f"hp-{disk.serial}"
        direct = disk.direct  # as for boot-time disks
        file = {"driver": "file", "filename": str(disk.path), "aio": "threads"}
        with self._monitor() as qmp:
            try:
                qmp.cmd(
                    "blockdev-add",
                    **{
                        "driver": disk.format,
                        "node-name": node,
                        "read-only": disk.readonly,
                        "cache": {"direct": direct},
                        "file": {**file, "cache": {"direct": direct}},
                    },
                )
            except QMPError as e:
                raise HarnessError(f"QEMU could not open disk {disk.path}: {e}") from None
            try:
                qmp.cmd(
                    "device_add",
                    driver="virtio-blk-pci",
                    id=node,
                    drive=node,
                    serial=disk.serial,
                    bus=port,
                )
            except QMPError as e:
                with contextlib.suppress(QMPError):
                    qmp.cmd("blockdev-del", **{"node-name": node})
                raise HarnessError(f"QEMU could not plug disk {disk.serial}: {e}") from None
            if caps := media.limits(disk.media):
                zero = dict.fromkeys(("bps_rd", "bps_wr", "iops_rd", "iops_wr"), 0)
                # The BlockBackend is the virtio-blk-pci proxy's child's, not the proxy's.
                backend = f"/machine/peripheral/{node}/virtio-backend"
                qmp.cmd("block_set_io_throttle", id=backend, bps=caps.bps, iops=caps.iops, **zero)
        self._ports[disk.serial] = port

    def _unplug(self, serials: Sequence[str], timeout: float) -> None:
        """``device_del`` asks the guest to eject a device; only its DEVICE_DELETED event
        says it is gone and the block node free to delete. All are asked first, so the
        guest ejects them together."""
        from qemu.qmp import QMPError

        nodes = {f"hp-{serial}": serial for serial in serials}
        deadline = time.monotonic() + timeout
        with self._monitor() as qmp:
            for node, serial in nodes.items():
                try:
                    qmp.cmd("device_del", id=node)
                except QMPError as e:
                    raise HarnessError(f"QEMU could not unplug disk {serial}: {e}") from None
            waiting = set(nodes)
            while waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GuestTimeout(
                        f"disk {', '.join(nodes[n] for n in sorted(waiting))}: the guest did "
                        f"not release it within {timeout:g} s (no DEVICE_DELETED)",
                        console=console.tail(self.console_log),
                    )
                with contextlib.suppress(TimeoutError):
                    event = qmp.pull_event(wait=float(left))
                    if event is not None and event.get("event") == "DEVICE_DELETED":
                        waiting.discard(event.get("data", {}).get("device"))
            for node, serial in nodes.items():
                qmp.cmd("blockdev-del", **{"node-name": node})
                del self._ports[serial]


class QemuBackend:
    name = "qemu"

    def machine(self, image: Image) -> Machine:
        return Machine(accel.choose(image), accel.qemu_version())

    @contextlib.contextmanager
    def start(self, spec: GuestSpec, image: Image | None = None) -> Iterator[QemuGuest]:
        image = image or require_image()
        accelerator = accel.choose(image)
        with workdir_for(spec) as workdir:
            yield from boot(
                lambda where: QemuGuest(image, spec, accelerator, where), QemuGuest.launch, workdir
            )
