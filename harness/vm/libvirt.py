"""The libvirt backend: the same guest as ``harness.vm.qemu``, as a transient libvirt domain.

Labs that manage their VMs with libvirt see the lab's guests with ``virsh list``, on this
host or a remote one (``--libvirt-uri qemu+ssh://HOST/system``). The domain is made from
generated XML (``domain_xml``): direct kernel boot of the cached image, q35, no NIC, the
root disk as a qcow2 overlay of the guest's own (``overlays``: guests share the image),
snapshot disks as libvirt ``<transient/>`` overlays, extra disks by serial,
the guest-agent channel and the serial console on a pty. It is started with
``VIR_DOMAIN_START_AUTODESTROY``: libvirtd destroys it when our connection closes, so a
killed harness leaves no domain behind either.

Everything the harness exchanges with the guest goes through the libvirt connection, so
a remote URI works like the local one: the agent (``qemuAgentCommand``), the console
(a stream into the local console log, ``libvirt_console``) and, with a storage pool
(``--libvirt-pool``), the image and the disks (``libvirt_storage``); without one the
libvirt host opens our files at our paths (this host: no copies). The console scan, the
panic and hang detection and the boot retry are the shared ones of ``harness.vm.guest``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.errors import GuestAgentError, GuestBootFailed, GuestError, GuestTimeout, HarnessError
from harness.image.build import Image, require_image
from harness.vm import (
    console,
    libvirt_accel,
    libvirt_storage,
    libvirt_xml,
    libvirtd,
    media,
    overlays,
)
from harness.vm.agent import Agent
from harness.vm.base import Disk, GuestSpec, Machine
from harness.vm.guest import AgentGuest, boot, kernel_cmdline, workdir_for
from harness.vm.libvirt_console import ConsoleStream
from harness.vm.libvirt_xml import el, pci

# As in qemu.py: the first disks sit on the root PCIe bus, the rest behind
# PCIe-to-PCI bridges of 31 slots each (slots 1-3: agent channel, RNG, root disk); each
# bridge sits in a root port of its own (controllers 1 and 2, 3 and 4, ...).
_ROOT_BUS_DISKS = 20
_FIRST_DISK_SLOT = 4


def domain_xml(
    image: Image, spec: GuestSpec, accelerator: str, name: str, root: Path | None = None
) -> str:
    """The domain: what ``qemu.qemu_argv`` gives QEMU, in libvirt's words. The paths are
    the libvirt host's: ours, or a storage pool's volumes (``libvirt_storage``). The root
    disk is the overlay ``root`` over ``image.rootfs`` (``harness.vm.overlays``; by
    default the domain's overlay file here)."""
    dom, dev = libvirt_xml.machine(
        name,
        accelerator,
        memory_mb=spec.memory_mb,
        cpus=spec.cpus,
        kernel=str(image.kernel),
        initrd=str(image.initrd),
        cmdline=kernel_cmdline(spec),
        cpu=libvirt_xml.cpu_mode(accelerator),
    )
    pci(el(dev, "controller", type="virtio-serial", index="0"), 0, 1)
    agent = el(dev, "channel", type="unix")
    el(agent, "source", mode="bind")
    el(agent, "target", type="virtio", name="org.qemu.guest_agent.0")
    rng = el(dev, "rng", model="virtio")
    el(rng, "backend", "/dev/urandom", model="random")
    pci(rng, 0, 2)
    root = root or overlays.overlay_dir() / overlays.name(name)
    _disk(dev, Disk(root, overlays.ROOT_SERIAL, format="qcow2"), "vda", bus=0, slot=3)
    # Named, so that libvirt opens the image read-only under the overlay whatever the
    # overlay's header says; the empty element: the image has no backing file itself.
    backing = el(dev[-1], "backingStore", type="file")
    el(backing, "format", type="qcow2")
    el(backing, "source", file=str(image.rootfs))
    el(backing, "backingStore")
    for i, d in enumerate(spec.disks):
        if d.blklogwrites is not None:
            raise HarnessError(
                f"disk {d.serial}: QEMU's blklogwrites recorder is not available on the "
                "libvirt backend (libvirt has no such disk driver)",
                hint="run this scenario with --backend qemu (or recorder.type=dm-log-writes)",
            )
        if i < _ROOT_BUS_DISKS:
            bus, slot = 0, _FIRST_DISK_SLOT + i
        else:
            bridge, index = divmod(i - _ROOT_BUS_DISKS, 31)
            bus, slot = 2 * bridge + 2, index + 1
            if index == 0:
                # libvirt plugs a pcie-to-pci-bridge into a root port, not into pcie.0.
                port = el(dev, "controller", type="pci", index=str(bus - 1), model="pcie-root-port")
                pci(port, 0, _FIRST_DISK_SLOT + _ROOT_BUS_DISKS + bridge)
                ctl = el(dev, "controller", type="pci", index=str(bus), model="pcie-to-pci-bridge")
                pci(ctl, bus - 1, 0)
        _disk(dev, d, _target(i + 1), bus=bus, slot=slot)
    # Spare root ports for disks plugged while the guest runs (the root bus has no
    # hotplug), after the bridges' controllers; libvirt gives them free slots, so every
    # device above keeps its address.
    first = 2 * _bridges(len(spec.disks)) + 1
    for n in range(spec.hotplug_ports):
        el(dev, "controller", type="pci", index=str(first + n), model="pcie-root-port")
    el(dev, "memballoon", model="none")
    return libvirt_xml.text(dom)


def _target(i: int) -> str:
    """vda, vdb, ... vdz, vdaa: libvirt wants a target name; the guest uses serials."""
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(ord("a") + r) + letters
    return "vd" + letters


def _disk(dev: ET.Element, d: Disk, target: str, *, bus: int, slot: int) -> None:
    disk = disk_element(d, target)
    dev.append(disk)
    pci(disk, bus, slot)


def _bridges(disks: int) -> int:
    """PCIe-to-PCI bridges for ``disks`` disks past the root bus's."""
    return -(-max(0, disks - _ROOT_BUS_DISKS) // 31)


def disk_element(d: Disk, target: str) -> ET.Element:
    """A ``<disk>`` without an address: a boot-time disk gets one from ``_disk``, a
    hot-plugged one from libvirt (a free root port)."""
    disk = ET.Element("disk", type="file", device="disk")
    el(
        disk,
        "driver",
        name="qemu",
        type=d.format,
        cache="none" if d.direct else "writeback",  # Disk.direct says why
        io="threads",
    )
    el(disk, "source", file=str(d.path))
    el(disk, "target", dev=target, bus="virtio")
    el(disk, "serial", d.serial)
    if d.readonly:
        el(disk, "readonly")
    if d.snapshot:
        el(disk, "transient")
    if caps := media.limits(d.media):
        tune = el(disk, "iotune")
        el(tune, "total_iops_sec", str(caps.iops))
        el(tune, "total_bytes_sec", str(caps.bps))
    return disk


class LibvirtAgent(Agent):
    """qemu-guest-agent through libvirt: libvirtd owns the channel, so there is no socket
    of ours; the calls of ``Agent`` (exec, files) go through ``qemuAgentCommand``."""

    # Measured here: a 64 KiB guest-file-write answers in 0.04 s, a 256 KiB one never (and
    # libvirt then calls the agent "not available" for good): files go in 48 KiB pieces.
    chunk = 48 << 10

    def __init__(self, name: str):
        super().__init__(Path(f"libvirt:{name}"))
        self.domain: Any = None

    def connect(self) -> None:
        return None

    def close(self) -> None:
        return None

    def sync(self, timeout: float) -> None:
        start = time.monotonic()
        try:
            self.call("guest-ping", timeout=timeout)
        except GuestTimeout:
            # libvirt says "not connected" at once while the guest boots: poll, not spin.
            time.sleep(max(0.0, min(0.02, timeout - (time.monotonic() - start))))
            raise

    def call(
        self, command: str, arguments: dict[str, Any] | None = None, *, timeout: float = 30
    ) -> Any:
        libvirt = libvirtd.module()
        import libvirt_qemu

        if self.domain is None:
            raise GuestAgentError("guest agent: the domain is not running")
        msg: dict[str, Any] = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        try:
            reply = libvirt_qemu.qemuAgentCommand(
                self.domain, json.dumps(msg), max(1, math.ceil(timeout)), 0
            )
        except libvirt.libvirtError as e:
            raise self._error(libvirt, command, e) from None
        return json.loads(reply).get("return")

    def _error(self, libvirt: Any, command: str, e: Any) -> GuestError:
        if e.get_error_code() == libvirt.VIR_ERR_AGENT_UNRESPONSIVE:
            return GuestTimeout(f"guest agent did not answer in time ({e})")
        with contextlib.suppress(libvirt.libvirtError):
            state, reason = self.domain.state()
            if state == libvirt.VIR_DOMAIN_PAUSED:
                # Paused (by virsh suspend, or by QEMU on a host I/O error): it cannot
                # answer, which for the lab is a hang, not a broken channel.
                return GuestTimeout(f"the domain is paused (reason {reason}): {command} unanswered")
        return GuestAgentError(f"guest agent: {command} failed: {e}")


class LibvirtGuest(AgentGuest):
    def __init__(
        self,
        conn: Any,
        uri: str,
        image: Image,
        spec: GuestSpec,
        accelerator: str,
        workdir: Path,
        pool: Any = None,
    ):
        """``image``'s paths are the libvirt host's; with ``pool``, the disks of ``spec``
        (ours) are uploaded into it at launch and downloaded back when the guest stops."""
        self.name = f"crashlab-{uuid.uuid4().hex[:12]}"
        self.agent: LibvirtAgent = LibvirtAgent(self.name)
        super().__init__(spec, accelerator, workdir / "console.log", self.agent)
        self.conn = conn
        self.uri = uri
        self.image = image
        self.workdir = workdir
        self.xml = ""
        self.domain: Any = None
        self.volumes = None if pool is None else libvirt_storage.RunVolumes(pool, self.name)
        self._overlay: Path | None = None  # the root disk's overlay file (no pool)
        self._console_stream: ConsoleStream | None = None
        # A hot-plugged disk's <disk> as attached (detach names the same device); its
        # target name is never reused while the domain lives.
        self._plugged: dict[str, str] = {}
        self._next_target = len(spec.disks) + 1

    def launch(self) -> None:
        libvirt = libvirtd.module()
        spec = self.spec
        if self.volumes is not None:
            root = self.volumes.overlay(self.image.rootfs)
            spec = replace(spec, disks=tuple(self.volumes.put(d) for d in spec.disks))
        else:
            root = self._overlay = overlays.create(self.name, self.image.rootfs)
        self.xml = domain_xml(self.image, spec, self.accelerator, self.name, root)
        (self.workdir / "domain.xml").write_text(self.xml)
        self._started = time.monotonic()
        flags = libvirt.VIR_DOMAIN_START_AUTODESTROY | libvirt.VIR_DOMAIN_START_PAUSED
        try:
            # Paused until the console stream is open: a pty nobody reads loses the output.
            self.domain = self.conn.createXML(self.xml, flags)
            self._console_stream = ConsoleStream(self.uri, self.domain, self.console_log)
            self.domain.resume()
        except libvirt.libvirtError as e:
            raise GuestBootFailed(
                f"libvirt could not start domain {self.name} on {self.uri}: {e}",
                console=self._failure_text(),
                hint=self._start_hint(),
            ) from None
        self.agent.domain = self.domain
        self._wait_for_agent()

    def _start_hint(self) -> str | None:
        """The usual cause on another host: a path of ours that it does not have."""
        if libvirtd.is_local_system(self.uri) or self.volumes is not None:
            return None
        return libvirt_storage.SHARE_HINT

    def _alive(self) -> bool:
        if self.domain is None:
            return False
        try:
            if self.domain.isActive():
                return True
        except libvirtd.module().libvirtError:
            pass  # a transient domain that stopped is gone from libvirt
        if self._console_stream is not None:
            # Its last words (a panic) may still be on their way to the console log.
            self._console_stream.wait(timeout=5.0)
        return False

    def _gone(self) -> str:
        return f"libvirt domain {self.name} is no longer running"

    def _failure_text(self) -> str:
        qemu_log = Path("/var/log/libvirt/qemu") / f"{self.name}.log"
        out = console.tail(qemu_log, 30) if libvirtd.is_local_system(self.uri) else ""
        return "\n".join(
            [
                f"$ virsh -c {self.uri} create {self.workdir / 'domain.xml'}",
                out,
                "--- console ---",
                console.tail(self.console_log),
            ]
        )

    def _plug(self, disk: Disk) -> None:
        libvirt = libvirtd.module()
        there = disk if self.volumes is None else self.volumes.put(disk)
        xml = ET.tostring(disk_element(there, _target(self._next_target)), encoding="unicode")
        try:
            self.domain.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as e:
            if self.volumes is not None:
                self.volumes.take_back(disk.serial, download=False)
            raise HarnessError(
                f"libvirt could not attach disk {disk.serial} to {self.name}: {e}"
            ) from None
        self._next_target += 1
        self._plugged[disk.serial] = xml

    def _unplug(self, serials: Sequence[str], timeout: float) -> None:
        """libvirt waits a few seconds for the guest to eject a device and may return
        before it has: the domain's live XML says when the disks are gone. All are asked
        first, so the guest ejects them together."""
        libvirt = libvirtd.module()
        for serial in serials:
            try:
                self.domain.detachDeviceFlags(self._plugged[serial], libvirt.VIR_DOMAIN_AFFECT_LIVE)
            except libvirt.libvirtError as e:
                raise HarnessError(
                    f"libvirt could not detach disk {serial} from {self.name}: {e}"
                ) from None
        deadline = time.monotonic() + timeout
        while waiting := set(serials) & self._live_serials():
            if time.monotonic() > deadline:
                raise GuestTimeout(
                    f"disk {', '.join(sorted(waiting))}: the guest did not release it "
                    f"within {timeout:g} s",
                    console=console.tail(self.console_log),
                )
            time.sleep(0.05)
        for serial in serials:
            del self._plugged[serial]
            if self.volumes is not None:
                self.volumes.take_back(serial)

    def _live_serials(self) -> set[str]:
        dom = ET.fromstring(self.domain.XMLDesc(0))
        return {s.text or "" for s in dom.iterfind("devices/disk/serial")}

    def kill(self) -> None:
        """Pull the plug: virDomainDestroy stops QEMU at once (SIGTERM, then SIGKILL); the
        guest syncs nothing, so the disks hold what QEMU had written: the crash state
        (with a storage pool, downloaded back over our disk files now)."""
        if self.domain is not None:
            with contextlib.suppress(libvirtd.module().libvirtError):
                self.domain.destroy()
        if self._console_stream is not None:
            self._console_stream.close()
            self._console_stream = None
        if self._overlay is not None:
            self._overlay.unlink(missing_ok=True)
            self._overlay = None
        volumes, self.volumes = self.volumes, None
        if volumes is not None:
            volumes.close(download=self.domain is not None)

    def shutdown(self) -> None:
        """Sync the guest, then destroy the domain (transient: then it is gone)."""
        if self._alive() and not self._hung:  # a hung guest would not answer the sync
            with contextlib.suppress(GuestError, OSError):
                self.agent.exec(["/bin/sync"], timeout=20)
        self.kill()


class LibvirtBackend:
    name = "libvirt"

    def __init__(self, uri: str = libvirtd.DEFAULT_URI, pool: str = ""):
        self.uri = uri
        self.pool = pool

    def machine(self, image: Image) -> Machine:
        with contextlib.closing(libvirtd.connect(self.uri)) as conn:
            return Machine(
                libvirt_accel.probe(conn, self.uri, image, self._pool(conn)).accelerator,
                libvirt_accel.emulator(conn, self.uri),
            )

    def _pool(self, conn: Any) -> Any:
        return libvirt_storage.open_pool(conn, self.uri, self.pool) if self.pool else None

    @contextlib.contextmanager
    def start(self, spec: GuestSpec, image: Image | None = None) -> Iterator[LibvirtGuest]:
        image = image or require_image()
        conn = libvirtd.connect(self.uri)
        try:
            pool = self._pool(conn)
            # The probe boots our kernel there (uploaded into the pool if there is one).
            accelerator = libvirt_accel.probe(conn, self.uri, image, pool).accelerator
            if pool is not None:
                image = libvirt_storage.stage_image(pool, image)
            there = image
            with workdir_for(spec) as workdir:
                yield from boot(
                    lambda where: LibvirtGuest(
                        conn, self.uri, there, spec, accelerator, where, pool
                    ),
                    LibvirtGuest.launch,
                    workdir,
                )
        finally:
            conn.close()
