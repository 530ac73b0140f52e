"""``scenario lab soak CAMPAIGN``: the campaign night after night with faults
(harness/campaign/soak.py), one row a night as each ends, and whether the lab kept its
promises: exit 0 when it did, 3 when the soak found the lab losing or double-counting
something, leaving something behind, or over its budget."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from harness import outcome, paths
from harness.campaign import soak, soakfaults
from harness.cli import ui
from harness.errors import InputError
from harness.store import prune

console = ui.console()


def register(lsub: Any) -> None:
    s = lsub.add_parser(
        "soak",
        help="run a campaign night after night with faults, and check what accumulates",
        description="Run CAMPAIGN as the nightly service does (campaign run, digest, prune), "
        "NIGHTS times back to back, with faults at seeded moments between and during nights; "
        "after each night check the store, the counts, the budget and what is left behind "
        "(harness/campaign/soak.py). Needs root: the cache is a tmpfs of its own.",
    )
    s.add_argument("campaign", type=Path)
    s.add_argument("--nights", type=int, default=7)
    s.add_argument("--faults", default=",".join(soakfaults.FAULTS),
                   help=f"comma-separated, of: {', '.join(soakfaults.FAULTS)}")  # fmt: skip
    s.add_argument("--budget", default="4G", help="the disk budget prune keeps (default 4G)")
    s.add_argument("--cache-size", default="8G", help="the soak cache's tmpfs (default 8G)")
    s.add_argument("--db", type=Path, required=True, help="the soak's store (a fresh file)")
    s.add_argument("--work", type=Path, default=None, help="its folder (default beside --db)")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--extra", type=float, default=0.25,
                   help="each fault's chance on a night beyond its own (0: each once)")  # fmt: skip
    s.add_argument("--json", type=Path, default=None, help="also write the nights here")
    s.set_defaults(func=cmd_soak)


def cmd_soak(args: argparse.Namespace) -> int:
    campaign = args.campaign if args.campaign.is_absolute() else paths.REPO / args.campaign
    if not campaign.is_file():
        raise InputError(f"{args.campaign}: no such campaign file", hint="see campaigns/")
    if args.nights < 1:
        raise InputError(f"--nights {args.nights}: at least one night", hint="--nights 7")
    faults = soakfaults.check([f for f in args.faults.split(",") if f])
    s = soak.Soak(
        campaign, args.nights, faults, prune.budget(args.budget), args.db.resolve(),
        (args.work or args.db.resolve().parent / "soak").resolve(), args.seed, args.cache_size,
        extra=args.extra,
    )  # fmt: skip
    s.work.mkdir(parents=True, exist_ok=True)
    nights = soak.run(s, on_night=lambda n: console.print(_line(n), markup=False))
    console.print(_table(nights))
    if args.json:
        args.json.write_text(json.dumps([n.to_json() for n in nights], indent=2))
    problems = [p for n in nights for p in n.problems]
    for p in problems:
        console.print(f"problem: {p}", markup=False)
    return outcome.status(harness=bool(problems))


def _line(n: soak.Night) -> str:
    return f"night {n.n}: {', '.join(n.faults) or 'no fault'}; " + "; ".join(n.did)


def _table(nights: list[soak.Night]) -> Table:
    t = Table(title="soak")
    for col in ("night", "faults", "starts", "exit", "s", "elements", "verdicts", "twice",
                "lost", "integrity", "disk before", "disk", "peak MiB", "left"):  # fmt: skip
        t.add_column(col)
    for n in nights:
        t.add_row(
            str(n.n), ", ".join(n.faults) or "-", str(n.starts),
            ",".join(str(s) for s in n.statuses), f"{n.seconds:.0f}",
            " ".join(f"{k} {v}" for k, v in sorted(n.elements.items())), str(n.verdicts),
            str(n.twice), str(n.lost), n.integrity, prune.human(n.disk_before),
            prune.human(n.disk),
            str(n.peak_rss >> 20), str(len(n.left)),
        )  # fmt: skip
    return t
