"""``scenario vm run`` (a command in a fresh guest) and ``scenario doctor`` (host checks)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.table import Table

from harness import outcome, paths, tools
from harness.cli import backend, ui
from harness.config.settings import parse_size, validate
from harness.config.vm import VmChoice
from harness.errors import InputError
from harness.image import build as image
from harness.kernel import store as kernel_store
from harness.kernel.boot import booting
from harness.report.markup import esc
from harness.store import prune
from harness.vm import accel, libvirt_accel, libvirt_storage, libvirtd
from harness.vm.accel import ProbeResult
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
    d.add_argument(
        "--libvirt-uri",
        metavar="URI",
        help="also the accelerator of this libvirt host's guests, by a probe boot there",
    )
    d.add_argument(
        "--libvirt-pool",
        metavar="NAME",
        help="its storage pool, for a host that does not share this host's files",
    )
    d.add_argument("--json", action="store_true", help="the checks as JSON")
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


def _libvirt_accel(uri: str, pool: str | None, img: image.Image, refresh: bool) -> ProbeResult:
    with contextlib.closing(libvirtd.connect(uri)) as conn:
        there = libvirt_storage.open_pool(conn, uri, pool) if pool else None
        return libvirt_accel.probe(conn, uri, img, there, refresh=refresh)


def _jfs_checker() -> tuple[str, str, str]:
    """Whose fsck.jfs the host checks run: Debian 12's cannot replay a JFS log
    (docs/findings/jfs-logredo-after-sigkill.md); the image build hands the host its own."""
    if not tools.available("fsck.jfs"):
        return "missing", "yellow", "JFS host checks: scenario image build installs the lab's"
    if tools.lab_built(tools.require("fsck.jfs")):
        return "lab build", "green", f"images/jfsutils, in {paths.lab_bin()}"
    return "Debian's", "yellow", "its log replay fails: scenario image build installs the lab's"


def cmd_doctor(args: argparse.Namespace) -> int:
    console = ui.console()
    rows: list[tuple[str, str, str, str]] = []  # check, status, its style, detail (plain)

    def add(check: str, status: str, style: str, detail: str = "") -> None:
        rows.append((check, status, style, detail))

    missing = False
    for tool in REQUIRED:
        ok = tools.available(tool)
        missing |= not ok
        hint = f"apt-get install {tools.PACKAGES.get(tool, tool)}"
        add(tool, "ok" if ok else "missing", "green" if ok else "red", "" if ok else hint)
    for tool, why in OPTIONAL.items():
        ok = tools.available(tool)
        hint = f"{why}: apt-get install {tools.PACKAGES.get(tool, tool)}"
        add(tool, "ok" if ok else "missing", "green" if ok else "yellow", why if ok else hint)
    add("fsck.jfs", *_jfs_checker())
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    add("/dev/kvm", "present" if kvm else "absent", "")
    recipe = image.load_recipe()
    img = image.cached(recipe)
    if img is None:
        add("guest image", "not built", "yellow", f"recipe {recipe.hash}: run scenario image build")
        add("accelerator", "not probed", "yellow", "needs the guest image's kernel")
    else:
        m = img.manifest
        add("guest image", "cached", "green", f"{img.hash}, kernel {m.get('kernel')},"
            f" ZFS {m.get('zfs_version')}")  # fmt: skip
        if tools.available("qemu-system-x86_64"):
            res = accel.probe(img, refresh=args.reprobe)
            again = " (cached probe; --reprobe to redo)" if res.cached else ""
            add("accelerator", res.accelerator, "bold", res.reason + again)
        if args.libvirt_uri:
            res = _libvirt_accel(args.libvirt_uri, args.libvirt_pool, img, args.reprobe)
            again = " (cached probe; --reprobe to redo)" if res.cached else ""
            add(f"accelerator on {args.libvirt_uri}", res.accelerator, "bold", res.reason + again)
    for k in kernel_store.cached():
        add("kernel", "cached", "green", f"{k.name}: {kernel_store.describe(k.source)}")
    used = prune.usage()
    parts = ", ".join(f"{kind} {prune.human(n)}" for kind, n in used.items())
    limit = os.environ.get(prune.BUDGET_ENV)
    over = limit is not None and sum(used.values()) > parse_size(limit)
    add("disk", prune.human(sum(used.values())), "yellow" if over else "",
        f"{parts}; budget {limit or 'none'} (${prune.BUDGET_ENV}; scenario lab prune)")  # fmt: skip
    if args.json:
        keys = ("check", "status", "detail")
        checks = [dict(zip(keys, (c, st, d), strict=True)) for c, st, _, d in rows]
        console.out(json.dumps({"checks": checks, "missing": missing}, indent=2))
        return outcome.status(harness=missing)
    t = Table("check", "status", "detail")
    for check, status, style, detail in rows:
        t.add_row(esc(check), f"[{style}]{esc(status)}[/]" if style else esc(status), esc(detail))
    console.print(t)
    if missing:
        console.print(
            "[red]some required programs are missing[/]: run scripts/install-host-deps as root"
        )
    return outcome.status(harness=missing)
