"""``scenario lab schedule``: a campaign every night (harness/campaign/schedule.py).

``scenario lab clean``: remove what killed harnesses left (harness/vm/leftovers.py):
orphaned guests, unused guest work directories, libvirt guests' root overlays and, with
``--libvirt URI --pool NAME``,
the volumes of libvirt guests that are gone. Found by the lab's own names only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness import paths, proc
from harness.campaign import schedule
from harness.cli import soak, ui
from harness.errors import InputError
from harness.image import build as image
from harness.store import prune
from harness.store.db import Store
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
    s = lsub.add_parser(
        "schedule",
        help="a campaign every night: print (or install) its systemd units, or a cron line",
        description="Print the systemd service and timer that run CAMPAIGN every night from "
        "this checkout (harness/campaign/schedule.py); --install writes them and enables the "
        "timer; --cron prints the crontab line for a host without systemd.",
    )
    s.add_argument("--campaign", type=Path, default=Path("campaigns/nightly.toml"))
    s.add_argument("--db", type=Path, default=None, help="the store (default results/lab.sqlite)")
    s.add_argument("--at", default="01:00", help="local time of day, HH:MM (default 01:00)")
    how = s.add_mutually_exclusive_group()
    how.add_argument("--cron", action="store_true", help="the crontab line instead")
    how.add_argument("--install", action="store_true", help="write the units, enable the timer")
    s.add_argument("--root", type=Path, default=Path("/"), help=argparse.SUPPRESS)
    s.add_argument("--budget", default=None, help="after each night, prune to this size (20G)")
    s.add_argument("--notify", default=None, metavar="CMD",
                   help="after each night, called with its digest (digest --notify)")  # fmt: skip
    s.set_defaults(func=cmd_schedule)
    pr = lsub.add_parser(
        "prune",
        help="keep the kernel cache, images and run folders within a disk budget",
        description="Remove the least recently used kernels, images and run folders until "
        "the lab's disk use is within the budget; never the store, a running or resumable "
        "run's folder, a finding's log or triage, the current image, or a kernel an "
        "unfinished campaign names (harness/store/prune.py).",
    )
    pr.add_argument("--budget", default=None,
                    help=f"e.g. 20G (default ${prune.BUDGET_ENV})")  # fmt: skip
    pr.add_argument("--db", type=Path, default=None, help="the store (default results/lab.sqlite)")
    pr.add_argument("--dry-run", action="store_true", help="only say what would go")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_prune)
    soak.register(lsub)


def cmd_schedule(args: argparse.Namespace) -> int:
    campaign = args.campaign if args.campaign.is_absolute() else paths.REPO / args.campaign
    if not campaign.is_file():
        raise InputError(f"--campaign {args.campaign}: no such campaign file",
                         hint="e.g. campaigns/nightly.toml")  # fmt: skip
    db = (args.db or paths.default_db()).resolve()
    if args.budget is not None:
        prune.budget(args.budget)  # a bad size: exit 2 now, not after a night
    s = schedule.Schedule(
        paths.REPO, campaign, db, paths.cache_dir(), args.at, args.budget, args.notify
    )
    if args.cron:
        console.out(s.cron())
        return 0
    if not args.install:
        for name, text in (("service", s.service()), ("timer", s.timer())):
            console.out(f"# /etc/systemd/system/{schedule.UNIT}.{name}\n{text}")
        return 0
    if args.root == Path("/") and not schedule.systemd_running():
        raise InputError("systemd is not this host's init: the units would never run",
                         hint="scenario lab schedule --cron, into root's crontab")  # fmt: skip
    for path in schedule.install(s, args.root):
        console.print(f"wrote {path}", markup=False)
    if args.root == Path("/"):
        proc.run(["systemctl", "daemon-reload"])
        proc.run(["systemctl", "enable", "--now", f"{schedule.UNIT}.timer"])
        console.print(f"enabled {schedule.UNIT}.timer: {s.at} every night", markup=False)
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    budget = prune.budget(args.budget)
    with Store.open(args.db or paths.default_db(), create=False) as store:
        items = prune.survey(store, image.load_recipe().hash)
    going, after = prune.plan(items, budget)
    if not args.dry_run:
        prune.remove(going)
    before = sum(i.size for i in items)
    if args.json:
        said = {
            "budget": budget, "before": before, "after": after, "removed": not args.dry_run,
            "going": [i.to_json() for i in going],
            "kept": [i.to_json() for i in items if i.keep],
        }  # fmt: skip
        console.out(json.dumps(said, indent=2))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for i in going:
        console.print(f"{verb} {i.kind} {i.path} ({prune.human(i.size)})", markup=False)
    line = f"{prune.human(before)} -> {prune.human(after)} of a {prune.human(budget)} budget"
    console.print(line, markup=False)
    if after > budget:
        kept = sum(i.size for i in items if i.keep)
        console.print(f"the budget cannot be met: {prune.human(kept)} is kept "
                      "(running, resumable, findings, the current image, other stores' runs)",
                      markup=False)  # fmt: skip
    return 0


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
