"""The direct-QEMU backend: one disposable guest per ``with`` block.

The guest's life is a stack on one ExitStack: a work directory, the QEMU process, the QMP
connection, the guest-agent channel. Whatever fails, the stack unwinds: the guest syncs,
QMP ``quit``, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import proc
from harness.errors import GuestAgentError, GuestBootFailed, GuestError, GuestPanic, GuestTimeout
from harness.image.build import Image, require_image
from harness.vm import accel, console
from harness.vm.agent import Agent, ExecResult
from harness.vm.backend import Disk, GuestSpec

log = logging.getLogger("crashlab.qemu")
# Boots tried before a guest that does not answer is the lab's timeout (``QemuBackend._boot``).
BOOT_ATTEMPTS = 2

GUEST_ENV = {"DM_DISABLE_UDEV": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}


def qemu_argv(image: Image, spec: GuestSpec, accelerator: str, workdir: Path) -> list[str]:
    cmdline = [
        "console=ttyS0",
        "root=/dev/vda",
        "rw",
        "init=/sbin/crashlab-init",
        "loglevel=4",
        "panic=-1",
        "tsc=reliable",
        "mitigations=off",
        # Emulated hardware has no use for these probes, and they cost seconds under TCG.
        "i8042.noaux",
        "i8042.nokbd",
        "i8042.nopnp",
        "random.trust_cpu=on",
    ]
    if spec.udev:
        cmdline.append("crashlab.udev=1")
    cmdline += list(spec.extra_cmdline)
    argv = accel.machine_argv(
        accelerator,
        image.kernel,
        image.initrd,
        " ".join(cmdline),
        workdir / "console.log",
        memory_mb=spec.memory_mb,
        cpus=spec.cpus,
    )
    argv += [
        "-qmp",
        f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
        "-chardev",
        f"socket,id=qga,path={workdir / 'qga.sock'},server=on,wait=off",
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
            "cache.direct=on" if d.format == "raw" and not d.snapshot else "cache=writeback",
            "aio=threads",
        ]
        if d.readonly:
            opts.append("readonly=on")
        if d.snapshot:
            opts.append("snapshot=on")
        slot = _slot(i, argv)  # may add a bridge to argv first
        argv += ["-drive", ",".join(opts)]
        argv += ["-device", f"virtio-blk-pci,drive=d{i},serial={d.serial}{slot}"]
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


class QemuGuest:
    def __init__(self, image: Image, spec: GuestSpec, accelerator: str, workdir: Path):
        self.image = image
        self.spec = spec
        self.accelerator = accelerator
        self.workdir = workdir
        self.console_log = workdir / "console.log"
        self.argv = qemu_argv(image, spec, accelerator, workdir)
        self.proc: proc.Child | None = None
        self._children = contextlib.ExitStack()
        self.agent = Agent(workdir / "qga.sock")
        self._started = 0.0
        self._ready = 0.0
        self._console = console.Reader(self.console_log)
        self._hung = False

    # -- lifecycle ------------------------------------------------------------------------
    def launch(self) -> None:
        self._started = time.monotonic()
        # QEMU's own output goes to a file, not a pipe nobody drains while the guest runs.
        self.proc = self._children.enter_context(
            proc.spawn(self.argv, output=self.workdir / "qemu.out")
        )
        self._wait_for_socket(self.workdir / "qga.sock", 10)
        self.agent.connect()
        self._wait_for_agent()
        self._ready = time.monotonic()

    def _wait_for_socket(self, path: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            self._check_alive("QEMU did not start")
            if time.monotonic() > deadline:
                raise GuestBootFailed(
                    "QEMU did not create its sockets", console=self._failure_text()
                )
            time.sleep(0.01)

    def _wait_for_agent(self) -> None:
        deadline = time.monotonic() + self.spec.boot_timeout
        while True:
            self._check_alive("the guest stopped while booting")
            self._check_console()
            try:
                self.agent.sync(timeout=1.0)
                return
            except GuestTimeout:
                if time.monotonic() > deadline:
                    raise GuestTimeout(
                        f"the guest did not answer within {self.spec.boot_timeout:g} s of boot",
                        console=console.tail(self.console_log),
                        hint="a hang while booting: see the console tail above",
                    ) from None
            except GuestAgentError:
                # The channel can reset while the guest opens the port; reconnect (QEMU
                # may refuse for a moment). A QEMU that died is caught at the loop's top.
                self.agent.close()
                time.sleep(0.05)
                with contextlib.suppress(GuestAgentError):
                    self.agent.connect()
                if time.monotonic() > deadline:
                    raise GuestBootFailed(
                        "the guest agent channel kept failing while booting",
                        console=self._failure_text(),
                    ) from None

    def _check_alive(self, what: str) -> None:
        assert self.proc is not None
        if self.proc.alive():
            return
        # The whole unread console, not a tail of it: a panic's stack trace can push its
        # first line out of any fixed window (seen once in CI: exit status 0, no panic line).
        found = console.scan(self._console.unseen(final=True))
        if found is not None and found.trouble is console.Trouble.PANIC:
            raise GuestPanic(f"kernel panic: {found.line}", console=console.tail(self.console_log))
        raise GuestBootFailed(
            f"{what} (QEMU exit status {self.proc.returncode})", console=self._failure_text()
        )

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

    def _check_console(self) -> None:
        """Raise GuestPanic for a panic or an oops that appeared since the last look."""
        found = console.scan(self._console.unseen())
        if found is not None:
            raise GuestPanic(
                f"kernel {found.trouble.value}: {found.line}",
                console=console.tail(self.console_log),
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
        with contextlib.suppress(Exception):
            from qemu.qmp.legacy import QEMUMonitorProtocol

            qmp = QEMUMonitorProtocol(str(self.workdir / "qmp.sock"))
            qmp.connect()
            qmp.cmd("quit")
            qmp.close()
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

    # -- the Guest protocol ---------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        check: bool = False,
    ) -> ExecResult:
        """Run ``argv`` in the guest. A hang raises GuestTimeout, a panic GuestPanic;
        the command's own failure is its exit status (or GuestCommandFailed with check)."""
        self._check_alive("the guest is gone")
        try:
            r = self.agent.exec(
                list(argv),
                input=input,
                env={**GUEST_ENV, **(env or {})},
                timeout=timeout or self.spec.command_timeout,
            )
        except GuestTimeout as e:
            self._hung = True
            self._raise_if_dead_or_panicked()
            raise GuestTimeout(
                e.message,
                console=console.tail(self.console_log),
                hint="a hang: the guest stopped answering",
            ) from None
        except GuestAgentError:
            self._raise_if_dead_or_panicked()
            raise
        self._check_console()
        if check and not r.ok:
            from harness.errors import HarnessError

            raise HarnessError(
                f"guest command failed with exit status {r.exitcode}: {argv[0]}",
                detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-2000:],
            )
        return r

    def _raise_if_dead_or_panicked(self, grace: float = 5.0) -> None:
        """The channel failed: a dying kernel takes a moment (seconds under TCG) to print
        its panic and for QEMU to exit, so look for either for ``grace`` seconds before
        calling it a plain channel failure or hang."""
        deadline = time.monotonic() + grace
        while True:
            self._check_alive("the guest stopped")
            self._check_console()
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def write_file(self, path: str, data: bytes) -> None:
        self.agent.write_file(path, data)

    def read_file(self, path: str) -> bytes:
        return self.agent.read_file(path)

    def qmp(self, command: str, **arguments: Any) -> Any:
        """One QMP command on a fresh connection (QMP is rarely needed; the agent is the
        command channel)."""
        from qemu.qmp.legacy import QEMUMonitorProtocol

        qmp = QEMUMonitorProtocol(str(self.workdir / "qmp.sock"))
        qmp.connect()
        try:
            return qmp.cmd(command, **arguments)
        finally:
            qmp.close()

    def disk(self, serial: str) -> str:
        return f"/dev/disk/by-id/virtio-{serial}"

    def boot_seconds(self) -> float:
        return self._ready - self._started


class QemuBackend:
    name = "qemu"

    @contextlib.contextmanager
    def start(self, spec: GuestSpec, image: Image | None = None) -> Iterator[QemuGuest]:
        image = image or require_image()
        for d in spec.disks:
            if not d.path.exists():
                from harness.errors import HarnessError

                raise HarnessError(f"disk image {d.path} does not exist")
        accelerator = accel.choose(image)
        with contextlib.ExitStack() as stack:
            if spec.workdir is None:
                # Unix socket paths must stay short (108 bytes): keep them under /tmp.
                workdir = Path(
                    stack.enter_context(tempfile.TemporaryDirectory(prefix="crashlab-vm-"))
                )
            else:
                workdir = spec.workdir
                workdir.mkdir(parents=True, exist_ok=True)
            guest = self._boot(image, spec, accelerator, workdir, stack)
            yield guest

    def _boot(
        self,
        image: Image,
        spec: GuestSpec,
        accelerator: str,
        workdir: Path,
        stack: contextlib.ExitStack,
    ) -> QemuGuest:
        """Launch the guest; a boot that never reaches the agent is tried once more in a
        fresh QEMU. No command has run yet, so a second boot changes nothing the experiment
        measures, and a one-off hang of the emulator (seen once in ~120 TCG boots of a CI
        run) is not worth a harness failure; a second hang is one, with its console."""
        for attempt in range(BOOT_ATTEMPTS):
            where = workdir if attempt == 0 else workdir / f"boot{attempt + 1}"
            where.mkdir(parents=True, exist_ok=True)
            guest = QemuGuest(image, spec, accelerator, where)
            try:
                guest.launch()
            except GuestTimeout as e:
                guest.kill()
                guest.shutdown()
                if attempt + 1 == BOOT_ATTEMPTS:
                    raise
                log.warning("%s; booting a fresh guest once more", e.message)
                continue
            stack.callback(guest.shutdown)
            return guest
        raise AssertionError("unreachable")
