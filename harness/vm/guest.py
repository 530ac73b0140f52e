"""What every backend's guest shares: the guest agent as the command channel, the console
scanned for panics and oopses, hang and boot-failure detection, and the boot retried once.

A backend supplies how its VM is started and stopped and three answers about it:
``_alive()`` (is the VM still running), ``_gone()`` (why not, in a few words) and
``_failure_text()`` (what it printed, for a boot failure); for disk hotplug, ``_plug()``
(one disk into one of its spare PCIe root ports, ``GuestSpec.hotplug_ports``) and
``_unplug()`` (several disks: every unplug asked for before waiting for any).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from harness.errors import (
    GuestAgentError,
    GuestBootFailed,
    GuestPanic,
    GuestTimeout,
    HarnessError,
    InputError,
)
from harness.vm import console
from harness.vm.agent import Agent, ExecResult
from harness.vm.base import Disk, GuestSpec

log = logging.getLogger("crashlab.qemu")
# Boots tried before a guest that does not answer is the lab's timeout (``boot()``).
BOOT_ATTEMPTS = 2

# virtio-blk serials are 20 bytes; the serial also names QEMU nodes and a guest symlink.
_SERIAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,19}")
# The guest has no udev by default, so nothing else makes a plugged disk's by-id link
# (init makes them once, at boot): wait for the serials in sysfs, then link each the way
# images/init does; on unplug, wait for them to go and drop the links. $1 1 to wait for
# them to appear or 0 to go, $2 seconds, then the serials; on a timeout it prints those
# still awaited. Builtins only (`read`, not `cat` or `date`): no fork per look, which
# under TCG is most of the cost. sysfs serials have no newline, so `read` fails at EOF
# with the value read: its status is ignored.
_WAIT_DISKS = r"""want=$1 secs=$2; shift 2
read -r up _ < /proc/uptime; end=$((${up%.*} + secs))
while :; do
    left=
    for s in "$@"; do
        dev=
        for d in /sys/block/vd*; do
            x=; read -r x < "$d/serial" 2>/dev/null; [ "$x" = "$s" ] && dev=${d##*/}
        done
        link=/dev/disk/by-id/virtio-$s
        if [ "$want" = 1 ] && [ -n "$dev" ] && [ -b "/dev/$dev" ]; then ln -sf "../../$dev" "$link"
        elif [ "$want" = 0 ] && [ -z "$dev" ]; then rm -f "$link"
        else left="$left $s"
        fi
    done
    [ -z "$left" ] && exit 0
    set -- $left
    read -r up _ < /proc/uptime; [ "${up%.*}" -ge "$end" ] && { echo "$left"; exit 1; }
    sleep 0.05
done"""

GUEST_ENV = {"DM_DISABLE_UDEV": "1", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}


def kernel_cmdline(spec: GuestSpec) -> str:
    """The guest kernel's command line, the same on every backend."""
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
    return " ".join(cmdline)


class AgentGuest:
    """A running guest driven through qemu-guest-agent; subclasses start and stop it."""

    spec: GuestSpec
    accelerator: str
    console_log: Path

    def __init__(self, spec: GuestSpec, accelerator: str, console_log: Path, agent: Agent):
        self.spec = spec
        self.accelerator = accelerator
        self.console_log = console_log
        self.agent = agent
        self._started = 0.0
        self._ready = 0.0
        self._console = console.Reader(console_log)
        self._hung = False  # a command timed out: the guest is not asked to sync at shutdown
        self.hotplugged: dict[str, Disk] = {}  # serial -> a disk attach_disk plugged in

    # -- what a backend answers -------------------------------------------------------------
    def _alive(self) -> bool:
        raise NotImplementedError

    def _gone(self) -> str:
        """Why the VM is no longer running (an exit status, a domain state)."""
        raise NotImplementedError

    def _failure_text(self) -> str:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def _plug(self, disk: Disk) -> None:
        """Plug ``disk`` into a free spare port (checked by ``attach_disk``)."""
        raise NotImplementedError

    def _unplug(self, serials: Sequence[str], timeout: float) -> None:
        """Unplug plugged disks, all asked for first; return once the VM let go of them."""
        raise NotImplementedError

    # -- booting ------------------------------------------------------------------------------
    def _wait_for_agent(self) -> None:
        deadline = time.monotonic() + self.spec.boot_timeout
        while True:
            self._check_alive("the guest stopped while booting")
            self._check_console()
            try:
                self.agent.sync(timeout=1.0)
                self._ready = time.monotonic()
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
                # may refuse for a moment). A VM that died is caught at the loop's top.
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
        if self._alive():
            return
        # The whole unread console, not a tail of it: a panic's stack trace can push its
        # first line out of any fixed window (seen once in CI: exit status 0, no panic line).
        found = console.scan(self._console.unseen(final=True))
        if found is not None and found.trouble is console.Trouble.PANIC:
            raise GuestPanic(f"kernel panic: {found.line}", console=console.tail(self.console_log))
        raise GuestBootFailed(f"{what} ({self._gone()})", console=self._failure_text())

    def _check_console(self) -> None:
        """Raise GuestPanic for a panic or an oops that appeared since the last look."""
        found = console.scan(self._console.unseen())
        if found is not None:
            raise GuestPanic(
                f"kernel {found.trouble.value}: {found.line}",
                console=console.tail(self.console_log),
            )

    def _raise_if_dead_or_panicked(self, grace: float = 5.0) -> None:
        """The channel failed: a dying kernel takes a moment (seconds under TCG) to print
        its panic and for the VM to stop, so look for either for ``grace`` seconds before
        calling it a plain channel failure or hang."""
        deadline = time.monotonic() + grace
        while True:
            self._check_alive("the guest stopped")
            self._check_console()
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    # -- the Guest protocol -------------------------------------------------------------------
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
        the command's own failure is its exit status (or HarnessError with check)."""
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
            raise HarnessError(
                f"guest command failed with exit status {r.exitcode}: {argv[0]}",
                detail="$ " + shlex.join(argv) + "\n" + (r.err or r.out).strip()[-2000:],
            )
        return r

    def write_file(self, path: str, data: bytes) -> None:
        self.agent.write_file(path, data)

    def read_file(self, path: str) -> bytes:
        return self.agent.read_file(path)

    def disk(self, serial: str) -> str:
        return f"/dev/disk/by-id/virtio-{serial}"

    def boot_seconds(self) -> float:
        return self._ready - self._started

    # -- disk hotplug ---------------------------------------------------------------------------
    def attach_disk(self, disk: Disk, *, timeout: float = 60.0) -> str:
        """Hot-plug ``disk``; see ``backend.Guest.attach_disk``."""
        return self.attach_disks([disk], timeout=timeout)[0]

    def attach_disks(self, disks: Sequence[Disk], *, timeout: float = 60.0) -> list[str]:
        """Hot-plug ``disks``, then wait once for the guest to see them all (one agent
        round trip, not one per disk); their paths in the guest, in order."""
        self._check_alive("the guest is gone")
        for disk in disks:
            self._check_pluggable(disk)
            self._plug(disk)
            self.hotplugged[disk.serial] = disk
        self._await_disks([d.serial for d in disks], present=True, timeout=timeout)
        return [self.disk(d.serial) for d in disks]

    def detach_disk(self, serial: str, *, timeout: float = 60.0) -> None:
        """Unplug a hot-plugged disk; see ``backend.Guest.detach_disk``."""
        self.detach_disks([serial], timeout=timeout)

    def detach_disks(self, serials: Sequence[str], *, timeout: float = 60.0) -> None:
        """Unplug hot-plugged disks, all asked for before waiting for any."""
        for serial in serials:
            if serial not in self.hotplugged:
                booted = {d.serial for d in self.spec.disks}
                raise InputError(
                    f"disk {serial!r} was not hot-plugged into this guest",
                    hint="boot-time disks sit on the root PCIe bus, which has no hotplug"
                    if serial in booted
                    else "attach it with attach_disk first",
                )
        self._check_alive("the guest is gone")
        self._unplug(serials, timeout)
        for serial in serials:
            del self.hotplugged[serial]
        self._await_disks(serials, present=False, timeout=timeout)

    def _check_pluggable(self, disk: Disk) -> None:
        if not _SERIAL.fullmatch(disk.serial):
            raise InputError(
                f"disk serial {disk.serial!r} cannot be hot-plugged",
                hint="1-20 characters of A-Z a-z 0-9 . _ - (virtio-blk serials are 20 bytes)",
            )
        in_use = {"crashlab-root", *(d.serial for d in self.spec.disks), *self.hotplugged}
        if disk.serial in in_use:
            raise InputError(
                f"disk serial {disk.serial!r} is already in use in this guest",
                hint="detach that disk first, or pick another serial",
            )
        if disk.snapshot or disk.blklogwrites is not None:
            raise InputError(
                f"disk {disk.serial}: snapshot and blklogwrites disks cannot be hot-plugged",
                hint="give them to the guest at boot (GuestSpec.disks)",
            )
        if disk.format not in ("raw", "qcow2"):
            raise InputError(f"disk {disk.serial}: format {disk.format!r} is not raw or qcow2")
        if not disk.path.is_file():
            raise HarnessError(f"disk image {disk.path} does not exist (or is not a file)")
        if self.spec.hotplug_ports == 0:
            raise HarnessError(
                f"cannot attach disk {disk.serial}: the guest was booted without hotplug ports",
                hint="boot it with GuestSpec(hotplug_ports=N) (harness.vm.backend.HOTPLUG_PORTS)",
            )
        if len(self.hotplugged) >= self.spec.hotplug_ports:
            raise HarnessError(
                f"cannot attach disk {disk.serial}: all {self.spec.hotplug_ports} hotplug ports "
                "of the guest hold a disk",
                hint="detach a hot-plugged disk first, or boot with more hotplug_ports",
            )

    def _await_disks(self, serials: Sequence[str], *, present: bool, timeout: float) -> None:
        if not serials:
            return
        seconds = str(max(1, math.ceil(timeout)))
        argv = ["sh", "-c", _WAIT_DISKS, "sh", "1" if present else "0", seconds, *serials]
        # The loop's own sleeps are the timeout; the agent's is only its backstop.
        r = self.run(argv, timeout=timeout + 30)
        if r.exitcode != 0:
            raise GuestTimeout(
                f"disk {', '.join(r.out.split()) or ', '.join(serials)}: the guest did not "
                f"see it {'appear' if present else 'go'} within {timeout:g} s",
                console=console.tail(self.console_log),
                hint="see the console tail for the kernel's PCI hotplug messages",
            )


G = TypeVar("G", bound=AgentGuest)


@contextlib.contextmanager
def workdir_for(spec: GuestSpec) -> Iterator[Path]:
    """The guest's work directory (console log, sockets); checks its disks exist first."""
    for d in spec.disks:
        if not d.path.exists():
            raise HarnessError(f"disk image {d.path} does not exist")
    if spec.workdir is not None:
        spec.workdir.mkdir(parents=True, exist_ok=True)
        yield spec.workdir
        return
    # Its sockets' names may be long: qemu.SockDir makes them fit.
    with tempfile.TemporaryDirectory(prefix="crashlab-vm-") as tmp:
        yield Path(tmp)


# A panic during boot that is the emulator's timing, not the kernel under test: the
# IO-APIC timer check gives up when an oversubscribed TCG host runs its vCPU too slowly
# (once in 25 boots of a known-bugs campaign beside another guest on 2 cores).
EMULATOR_PANICS = ("IO-APIC + timer doesn't work",)


def _emulator_hiccup(e: GuestTimeout | GuestPanic) -> bool:
    return isinstance(e, GuestTimeout) or any(p in e.message for p in EMULATOR_PANICS)


def boot(make: Callable[[Path], G], launch: Callable[[G], None], workdir: Path) -> Iterator[G]:
    """Launch a guest; a boot that never reaches the agent is tried once more in a fresh
    VM. No command has run yet, so a second boot changes nothing the experiment measures,
    and a one-off hang of the emulator (seen once in ~120 TCG boots of a CI run) is not
    worth a harness failure; a second hang is one, with its console. So is a panic of
    the emulator's timing (``EMULATOR_PANICS``) before any command ran. The guest is shut
    down however the caller's block ends."""
    for attempt in range(BOOT_ATTEMPTS):
        where = workdir if attempt == 0 else workdir / f"boot{attempt + 1}"
        where.mkdir(parents=True, exist_ok=True)
        guest = make(where)
        try:
            launch(guest)
        except (GuestTimeout, GuestPanic) as e:
            guest.kill()
            guest.shutdown()
            if attempt + 1 == BOOT_ATTEMPTS or not _emulator_hiccup(e):
                raise
            log.warning("%s; booting a fresh guest once more", e.message)
            continue
        except BaseException:
            guest.shutdown()
            raise
        try:
            yield guest
        finally:
            guest.shutdown()
        return
    raise AssertionError("unreachable")
