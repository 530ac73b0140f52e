"""KVM or TCG: probe once with a real boot, cache the answer, fall back by ourselves.

``/dev/kvm`` existing proves little: on some hosts (nested PVM) a stock kernel hangs under
KVM or QEMU aborts setting an MSR. So the probe boots the guest kernel with a busybox
initramfs under KVM and waits for it to say so on the console. The same floor boot, under
the chosen accelerator, is what `bench/boot.py` measures our guest against.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import paths, proc, tools
from harness.errors import HarnessError
from harness.image.build import Image

PROBE_OK = "crashlab-probe-ok"
PROBE_TIMEOUT = 30.0
PROBE_CMDLINE = "console=ttyS0 loglevel=4 panic=-1 rdinit=/init"

_INIT = f"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
echo {PROBE_OK} > /dev/ttyS0
/bin/busybox poweroff -f
"""


@dataclass(frozen=True)
class ProbeResult:
    accelerator: str
    kvm_works: bool
    reason: str
    cached: bool = False


def probe_initramfs() -> Path:
    """A busybox initramfs that prints PROBE_OK and powers off (built once, cached)."""
    busybox = Path(tools.require("busybox"))
    key = hashlib.sha256(_INIT.encode() + busybox.read_bytes()).hexdigest()[:12]
    out = paths.cache_dir() / f"probe-initramfs-{key}.cpio"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        (root / "dev").mkdir()
        shutil.copy2(busybox, root / "bin/busybox")
        (root / "init").write_text(_INIT)
        (root / "init").chmod(0o755)
        files = "\n".join(["init", "bin", "bin/busybox", "dev"]) + "\n"
        tmp_out = out.with_suffix(".tmp")
        proc.run(["cpio", "-o", "-H", "newc", "--quiet", "-F", tmp_out], input=files, cwd=root)
        tmp_out.rename(out)
    return out


def machine_argv(
    accelerator: str,
    kernel: Path,
    initrd: Path,
    append: str,
    console: Path,
    *,
    memory_mb: int,
    cpus: int = 1,
) -> list[str]:
    """The bare machine: q35, no default devices, no NIC (no iPXE ROM, no floppy probe),
    direct kernel boot, serial console to a file. The floor boot is exactly this; a
    guest adds its disks and the agent channel to it."""
    return [
        tools.require("qemu-system-x86_64"),
        "-machine", f"q35,accel={accelerator}",
        "-cpu", "host" if accelerator == "kvm" else "max",
        "-m", str(memory_mb), "-smp", str(cpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-nic", "none", "-no-reboot",
        "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
        "-chardev", f"file,id=con,path={console}", "-serial", "chardev:con",
    ]  # fmt: skip


def floor_boot(kernel: Path, accelerator: str, timeout: float = PROBE_TIMEOUT) -> float | None:
    """Seconds from QEMU start to the busybox initramfs speaking; None if it never did."""
    initrd = probe_initramfs()
    with tempfile.TemporaryDirectory(prefix="crashlab-probe-") as tmp:
        con = Path(tmp) / "console.log"
        argv = machine_argv(
            accelerator,
            kernel,
            initrd,
            PROBE_CMDLINE,
            con,
            memory_mb=512,
        )
        start = time.monotonic()
        with proc.spawn(argv, grace=0) as child:
            while time.monotonic() - start < timeout:
                if con.exists() and PROBE_OK in con.read_text(errors="replace"):
                    return time.monotonic() - start
                if not child.alive():
                    return None
                time.sleep(0.01)
            return None


def _cache_file() -> Path:
    return paths.cache_dir() / "accel.json"


def _cache_key(image: Image) -> str:
    qemu = Path(tools.require("qemu-system-x86_64"))
    st = qemu.stat()
    return f"{image.hash}:{platform.release()}:{st.st_size}:{int(st.st_mtime)}"


def forced() -> ProbeResult | None:
    """``CRASHLAB_ACCEL=kvm|tcg``: the accelerator without a probe, for any backend."""
    chosen = os.environ.get("CRASHLAB_ACCEL")
    if chosen in ("kvm", "tcg"):
        return ProbeResult(chosen, chosen == "kvm", "set by CRASHLAB_ACCEL")
    return None


def probe(image: Image, *, refresh: bool = False) -> ProbeResult:
    if (chosen := forced()) is not None:
        return chosen
    return cached(_cache_file(), _cache_key(image), lambda: _probe_now(image), refresh=refresh)


def cached(
    cache: Path, key: str, probe_now: Callable[[], ProbeResult], *, refresh: bool = False
) -> ProbeResult:
    """The answer ``cache`` holds for ``key``; else ``probe_now()``'s, kept there."""
    if not refresh and cache.exists():
        with _ignore_bad_cache():
            data = json.loads(cache.read_text())
            if data.get("key") == key:
                return ProbeResult(
                    data["accelerator"], data["kvm_works"], data["reason"], cached=True
                )
    result = probe_now()
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(
        json.dumps(
            {
                "key": key,
                "accelerator": result.accelerator,
                "kvm_works": result.kvm_works,
                "reason": result.reason,
            }
        )
    )
    return result


def _probe_now(image: Image) -> ProbeResult:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return ProbeResult("tcg", False, "/dev/kvm is missing or not accessible")
    took = floor_boot(image.kernel, "kvm")
    if took is None:
        return ProbeResult("tcg", False, "a test boot under KVM failed or hung; using TCG")
    return ProbeResult("kvm", True, f"a test boot under KVM took {took:.1f} s")


def choose(image: Image) -> str:
    return probe(image).accelerator


class _ignore_bad_cache:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], (ValueError, KeyError, TypeError))  # type: ignore[arg-type]


def qemu_version() -> str:
    """The host QEMU's version line, as runs record it ("unknown" if it cannot say)."""
    try:
        return proc.run(["qemu-system-x86_64", "--version"]).stdout.splitlines()[0]
    except (HarnessError, IndexError):
        return "unknown"
