"""KVM or TCG for a libvirt guest, decided where the guest runs: by a probe boot on the
libvirt host, through libvirt, for any URI (this host's ``qemu:///system`` too).

1. The host's domain capabilities (``virConnectGetDomainCapabilities``, what ``virsh
   domcapabilities --virttype kvm`` prints) must offer KVM with the host's CPU passed
   through, as the lab's domain asks for: libvirt refuses the question when the host has
   no KVM. Otherwise TCG, without a boot.
2. Listed is not proven. On a nested host ``/dev/kvm`` exists and libvirt lists KVM, yet
   no KVM guest runs: measured on this lab host (libvirt 9.0, QEMU 7.2), the lab's domain
   (``host-passthrough``) does not start (QEMU aborts: "failed to set MSR 0x10a"), and
   with QEMU's default CPU it starts, SeaBIOS boots, and the kernel then spins its vCPU
   with nothing on the console. A disk-less SeaBIOS boot alone proves nothing: it reaches
   "No bootable device." under that hanging KVM too. So the probe boots what the guest
   boots: a transient domain of type kvm, the guest's bare machine (``libvirt_xml``) with
   128 MiB and no disk, the image's kernel with ``accel``'s busybox initramfs (direct
   kernel boot, SeaBIOS on the console too), the console read through a libvirt stream
   (``libvirt_console``: it works remotely). KVM iff the initramfs says
   ``accel.PROBE_OK`` within ``accel.PROBE_TIMEOUT``; a domain libvirt cannot start, one
   that stops first, or one that stays silent (a hang) means TCG, with why (``judge``).
3. The kernel and initramfs are the host's to open: with a storage pool, its volumes
   (uploaded once, by content, as the guest's image is: ``libvirt_storage``); without
   one, ours at our paths, as the guest's are.
4. The answer is cached per libvirt URI, host name, the host's QEMU and libvirt versions
   and the kernel's content (``accel.cached``). ``CRASHLAB_ACCEL=kvm|tcg`` overrides it.

The probe domain is named like the lab's guests (``crashlab-<12 hex>``), started with
AUTODESTROY (it dies with our connection if we are killed) and destroyed on every exit.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths
from harness.errors import HarnessError
from harness.image.build import Image
from harness.vm import accel, libvirt_storage, libvirt_xml, libvirtd
from harness.vm.accel import ProbeResult
from harness.vm.libvirt_console import ConsoleStream

PROBE_MEMORY_MB = 128  # enough for the kernel and the busybox initramfs (TCG: 5.8 s here)
_POLL = 0.1


def kvm_refusal(caps_xml: str) -> str | None:
    """Why domain capabilities ``caps_xml`` do not offer the lab's KVM guest; None if
    they do."""
    caps = ET.fromstring(caps_xml)
    domain = caps.findtext("domain")
    if domain != "kvm":
        return f"its domain capabilities are for domain type {domain!r}, not 'kvm'"
    passthrough = caps.find("cpu/mode[@name='host-passthrough']")
    if passthrough is None or passthrough.get("supported") != "yes":
        return "KVM without the host-passthrough CPU mode"
    return None


@dataclass(frozen=True)
class Boot:
    """What a probe boot showed: its console, the seconds until it spoke, stopped or was
    given up, and whether libvirt refused to start it (its error) or it stopped."""

    console: str
    seconds: float
    refused: str = ""
    ended: bool = False


def judge(boot: Boot, uri: str, timeout: float) -> ProbeResult:
    """KVM only for a boot whose initramfs spoke; any other boot is TCG, and why."""
    where = f"libvirt on {uri}"
    if boot.refused:
        said = " / ".join(ln.strip() for ln in boot.refused.splitlines() if ln.strip())
        return ProbeResult("tcg", False, f"{where} could not start a KVM test domain: {said}")
    if accel.PROBE_OK in boot.console:
        return ProbeResult(
            "kvm", True, f"a test boot under KVM through {where} took {boot.seconds:.1f} s"
        )
    said = _last_line(boot.console)
    last = f"last console line {said!r}" if said else "its console stayed empty"
    if boot.ended:
        return ProbeResult(
            "tcg",
            False,
            f"a test boot under KVM through {where} stopped before its initramfs spoke ({last})",
        )
    return ProbeResult(
        "tcg",
        False,
        f"a test boot under KVM through {where} hung: no {accel.PROBE_OK!r} on its console "
        f"in {timeout:g} s ({last})",
    )


def unopened(boot: Boot, files: tuple[str, ...]) -> str | None:
    """Which of ``files`` (the probe's kernel and initramfs, on the libvirt host) QEMU
    there could not open: its refusal names the path ("could not open kernel file
    'PATH'", "error reading initrd PATH: ..."); None if it names none of them."""
    return next((f for f in files if re.search(re.escape(f) + r"(?![\w./-])", boot.refused)), None)


def _last_line(console: str) -> str:
    """The console's last line, without SeaBIOS's terminal escapes ("" if none)."""
    plain = re.sub(r"\x1b(\[[0-9;?]*[A-Za-z]|.)", "", console)
    return next((ln.strip() for ln in reversed(plain.splitlines()) if ln.strip()), "")


def probe_xml(name: str, kernel: str, initrd: str, cpu: str | None) -> str:
    """The probe domain: the guest's bare machine under KVM, SeaBIOS on the console too
    (so a hang says whether the firmware ran)."""
    dom, dev = libvirt_xml.machine(
        name,
        "kvm",
        memory_mb=PROBE_MEMORY_MB,
        cpus=1,
        kernel=kernel,
        initrd=initrd,
        cmdline=accel.PROBE_CMDLINE,
        cpu=cpu,
    )
    libvirt_xml.el(dom.find("os"), "bios", useserial="yes")  # type: ignore[arg-type]
    libvirt_xml.el(dev, "memballoon", model="none")
    return libvirt_xml.text(dom)


def boot(
    conn: Any,
    uri: str,
    kernel: str,
    initrd: str,
    *,
    cpu: str | None = libvirt_xml.cpu_mode("kvm"),
    timeout: float = accel.PROBE_TIMEOUT,
) -> Boot:
    """Boot the probe domain on ``conn``'s host (``kernel``, ``initrd``: its paths there)
    until its initramfs speaks, it stops, or ``timeout``; destroy it whatever happens."""
    libvirt = libvirtd.module()
    xml = probe_xml(f"crashlab-{uuid.uuid4().hex[:12]}", kernel, initrd, cpu)
    flags = libvirt.VIR_DOMAIN_START_AUTODESTROY | libvirt.VIR_DOMAIN_START_PAUSED
    with tempfile.TemporaryDirectory(prefix="crashlab-probe-") as tmp:
        log = Path(tmp) / "console.log"
        start = time.monotonic()
        try:
            dom = conn.createXML(xml, flags)
        except libvirt.libvirtError as e:
            return Boot("", time.monotonic() - start, refused=str(e))
        stream: ConsoleStream | None = None
        try:
            # Paused until the stream is open: a pty nobody reads loses the output.
            stream = ConsoleStream(uri, dom, log)
            dom.resume()
            while (took := time.monotonic() - start) < timeout:
                if accel.PROBE_OK in _read(log):
                    return Boot(_read(log), took)
                if not _active(dom):
                    stream.wait(timeout=5.0)  # its last words on their way to the file
                    return Boot(_read(log), took, ended=True)
                time.sleep(_POLL)
            return Boot(_read(log), took)
        finally:
            with contextlib.suppress(libvirt.libvirtError):
                dom.destroy()
            if stream is not None:
                stream.close()


def _read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _active(dom: Any) -> bool:
    try:
        return bool(dom.isActive())
    except libvirtd.module().libvirtError:
        return False  # a transient domain that stopped is gone from libvirt


def probe(
    conn: Any, uri: str, image: Image, pool: Any = None, *, refresh: bool = False
) -> ProbeResult:
    """The accelerator for guests of ``conn`` (libvirt URI ``uri``), booting ``image``'s
    kernel (ours: with ``pool``, uploaded into it) there once, then cached."""
    if (forced := accel.forced()) is not None:
        return forced
    libvirt = libvirtd.module()
    try:
        caps = conn.getDomainCapabilities(None, "x86_64", "q35", "kvm", 0)
    except libvirt.libvirtError as e:
        return ProbeResult("tcg", False, f"libvirt on {uri} offers no KVM: {e}")
    if (why := kvm_refusal(caps)) is not None:
        return ProbeResult("tcg", False, f"libvirt on {uri}: {why}")
    initrd = accel.probe_initramfs()
    key = "|".join(
        [
            uri,
            conn.getHostname(),
            str(conn.getVersion()),
            str(conn.getLibVersion()),
            libvirt_storage.content_hash(image.kernel),
            initrd.name,  # named by its content
        ]
    )
    cache = (
        paths.cache_dir()
        / "accel-libvirt"
        / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    )

    def probe_now() -> ProbeResult:
        files = (_there(pool, image.kernel), _there(pool, initrd))
        seen = boot(conn, uri, *files)
        if (path := unopened(seen, files)) is not None:
            # Not an answer about KVM (and not to be cached): the guest would fail alike.
            raise HarnessError(
                f"libvirt on {uri} cannot open {path} for the KVM probe boot: {seen.refused}",
                hint=libvirt_storage.SHARE_HINT if pool is None else None,
            )
        return judge(seen, uri, accel.PROBE_TIMEOUT)

    return accel.cached(cache, key, probe_now, refresh=refresh)


def _there(pool: Any, path: Path) -> str:
    """``path`` as the libvirt host opens it: a volume of ``pool``, or our path."""
    return str(path) if pool is None else libvirt_storage.content_volume(pool, path)


def emulator(conn: Any, uri: str) -> str:
    """The libvirt host's QEMU, as a run records it."""
    v = conn.getVersion()
    return f"QEMU {v // 1_000_000}.{v // 1000 % 1000}.{v % 1000} (libvirt {uri})"
