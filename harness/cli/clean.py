"""``scenario lab clean``: remove what killed harnesses left (harness/vm/leftovers.py):
orphaned guests, unused guest work directories, libvirt guests' root overlays and, with
``--libvirt URI --pool NAME``,
the volumes of libvirt guests that are gone. Found by the lab's own names only."""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.cli import ui
from harness.vm import leftovers, libvirt_storage, libvirtd

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("lab", help="the lab's own housekeeping")
    lsub = p.add_subparsers(dest="lab_command", metavar="ACTION", required=True)
    c = lsub.add_parser(
        "clean", help="remove guests, work directories and volumes killed harnesses left"
    )
    c.add_argument("--dry-run", action="store_true", help="only say what would go")
    c.add_argument("--libvirt", metavar="URI", help="also a libvirt host's guest volumes")
    c.add_argument("--pool", default="crashlab", help="its storage pool (default: crashlab)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_clean)


def cmd_clean(args: argparse.Namespace) -> int:
    found = leftovers.find()
    pool = None
    if args.libvirt:
        conn = libvirtd.connect(args.libvirt)
        pool = libvirt_storage.open_pool(conn, args.libvirt, args.pool)
        found += leftovers.volumes(pool, conn)
    if not args.dry_run:
        leftovers.remove(found, pool)
    if args.json:
        console.out(
            json.dumps(
                {"removed": not args.dry_run, "leftovers": [f.to_json() for f in found]}, indent=2
            )
        )
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for f in found:
        console.print(f"{verb} {f.kind} {f.what}: {f.why}", markup=False)
    if not found:
        console.print("nothing left behind", markup=False)
    return 0
