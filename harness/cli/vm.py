"""``scenario vm run`` (a command in a fresh guest) and ``scenario doctor`` (host checks)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from harness import tools
from harness.cli import backend, ui
from harness.config.settings import parse_size, validate
from harness.config.vm import VmChoice
from harness.errors import InputError
from harness.image import build as image
from harness.kernel import store as kernel_store
from harness.kernel.store import booting
from harness.report.markup import esc
from harness.vm import accel
from harness.vm.backend import Disk, GuestSpec, start_guest

REQUIRED = [
    "qemu-system-x86_64",
    "qemu-img",
    "mmdebstrap",
    "busybox",
    "cpio",
    "mkfs.ext4",
    "e2fsck",
    "e2undo",
    "xfs_repair",
    "btrfs",
]
OPTIONAL = {
    "zdb": "host-side ZFS checks",
    "mkfs.xfs": "host-made xfs fixtures",
    "sqlite3": "opening the store by hand",
}


def register(sub: Any) -> None:
    d = sub.add_parser("doctor", help="check the host: QEMU, KVM or TCG, mmdebstrap, fs tools")
    d.add_argument(
        "--reprobe", action="store_true", help="probe KVM again instead of using the cached answer"
    )
    d.set_defaults(func=cmd_doctor)

    p = sub.add_parser("vm", help="run commands in a fresh disposable guest")
    vsub = p.add_subparsers(dest="vm_command", metavar="ACTION", required=True)
    r = vsub.add_parser(
        "run", help="boot a fresh guest, run a command, print its output, tear down"
    )
    r.add_argument(
        "--disk",
        action="append",
        default=[],
        metavar="SIZE|FILE",
        help="attach a disk: a size (e.g. 256M, a fresh sparse file) or an existing raw file; "
        "repeatable; serials disk0, disk1, … (/dev/disk/by-id/virtio-diskN)",
    )
    r.add_argument(
        "--udev", action="store_true", help="start udev in the guest (ZFS on whole disks)"
    )
    r.add_argument("--memory", type=int, default=1024, metavar="MiB")
    r.add_argument("--timeout", type=float, default=300, help="seconds the command may take")
    backend.add_options(r)
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    r.set_defaults(func=cmd_vm_run)


def cmd_vm_run(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise InputError("vm run: no command given", hint="scenario vm run --disk 256M -- lsblk")
    err = ui.console(stderr=True)
    sets = dict(o.split("=", 1) for o in backend.overrides(args))
    choice = validate(Path("vm run"), VmChoice, sets, list(sets))
    backend.select_for(choice)
    with (
        booting(choice.kernel),
        tempfile.TemporaryDirectory(
            prefix="crashlab-disks-", dir=os.environ.get("CRASHLAB_WORK")
        ) as tmp,
    ):
        disks = []
        for i, spec in enumerate(args.disk):
            path = Path(spec)
            if not path.exists():
                try:
                    size = parse_size(spec)
                except ValueError:
                    raise InputError(
                        f"--disk {spec!r}: neither an existing file nor a size",
                        hint="e.g. --disk 256M or --disk /path/to/disk.raw",
                    ) from None
                path = Path(tmp) / f"disk{i}.raw"
                with open(path, "wb") as f:
                    f.truncate(size)
            disks.append(Disk(path=path, serial=f"disk{i}"))
        spec = GuestSpec(
            disks=tuple(disks), udev=args.udev, memory_mb=args.memory, command_timeout=args.timeout
        )
        with start_guest(spec) as guest:
            err.print(
                f"[dim]guest up in {guest.boot_seconds():.1f} s ({esc(guest.accelerator)})[/]"
            )
            r = guest.run(cmd, timeout=args.timeout)
        sys.stdout.write(r.out)
        sys.stdout.flush()
        sys.stderr.write(r.err)
        if r.signal is not None:
            err.print(f"[yellow]killed by signal {r.signal}[/]")
            return 128 + r.signal
        return r.exitcode


def cmd_doctor(args: argparse.Namespace) -> int:
    console = ui.console()
    t = Table("check", "status", "detail")
    missing = False
    for tool in REQUIRED:
        ok = tools.available(tool)
        missing |= not ok
        t.add_row(
            tool,
            "[green]ok[/]" if ok else "[red]missing[/]",
            "" if ok else f"apt-get install {tools.PACKAGES.get(tool, tool)}",
        )
    for tool, why in OPTIONAL.items():
        ok = tools.available(tool)
        t.add_row(
            tool,
            "[green]ok[/]" if ok else "[yellow]missing[/]",
            why if ok else f"{why}: apt-get install {tools.PACKAGES.get(tool, tool)}",
        )
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    t.add_row("/dev/kvm", "present" if kvm else "absent", "")
    recipe = image.load_recipe()
    img = image.cached(recipe)
    if img is None:
        t.add_row(
            "guest image", "[yellow]not built[/]", f"recipe {recipe.hash}: run scenario image build"
        )
        t.add_row("accelerator", "[yellow]not probed[/]", "needs the guest image's kernel")
    else:
        t.add_row(
            "guest image",
            "[green]cached[/]",
            esc(
                f"{img.hash}, kernel {img.manifest.get('kernel')},"
                f" ZFS {img.manifest.get('zfs_version')}"
            ),
        )
        if tools.available("qemu-system-x86_64"):
            res = accel.probe(img, refresh=args.reprobe)
            t.add_row(
                "accelerator",
                f"[bold]{esc(res.accelerator)}[/]",
                esc(res.reason + (" (cached probe; --reprobe to redo)" if res.cached else "")),
            )
    for k in kernel_store.cached():
        t.add_row("kernel", "[green]cached[/]", esc(f"{k.name}: {kernel_store.describe(k.source)}"))
    console.print(t)
    if missing:
        console.print(
            "[red]some required programs are missing[/]: run scripts/install-host-deps as root"
        )
        return 3
    return 0
