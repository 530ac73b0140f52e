"""``scenario check-log LOG``: a dm-log-writes log recorded elsewhere (fstests, QEMU's
blklogwrites, hardware), its crash states checked and stored as a run.

The flags become a ``check-log`` scenario (``harness/experiments/checklog``), run on the
lifecycle like any other; ``--set`` reaches every key the kind has."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from harness.cli import backend
from harness.cli.lab import add_set_option
from harness.cli.run import run_and_report
from harness.config import scenario
from harness.config.crash import FsType
from harness.config.states import KINDS
from harness.record import logwrites


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check-log",
        help="check the crash states of a dm-log-writes log recorded elsewhere (fstests)",
    )
    p.add_argument("log", type=Path, metavar="LOG", help="the dm-log-writes log")
    p.add_argument("--fs", required=True, choices=[str(t) for t in FsType])
    p.add_argument(
        "--device-size", required=True, metavar="SIZE", help="the recorded device's size, e.g. 200M"
    )
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--after-mark", metavar="TEXT", help="states start after this mark (fstests: mkfs)"
    )
    start.add_argument(
        "--after-entry", type=int, metavar="N", help="states start after log entry N"
    )
    p.add_argument(
        "--states",
        default="fua",
        metavar="KINDS",
        help=f"crash-state generators, comma separated: {', '.join(KINDS)} (default fua)",
    )
    p.add_argument("--max-states", type=int, default=None, metavar="N")
    p.add_argument(
        "--oracle", type=Path, help="an oracle.json of the lab's; without one fsck and mount judge"
    )
    p.add_argument("--mkfs-options", default="", metavar="ARGS", help="e.g. '-J size=1'")
    p.add_argument("--mount-options", default="", metavar="OPTS", help="e.g. data=journal,noatime")
    p.add_argument("--host-only", action="store_true", help="no guest: the host checker only")
    add_set_option(p)
    p.add_argument("--seed", type=int, help="the same as --set seed=N")
    p.add_argument("--db", type=Path, default=None)
    p.add_argument("--fresh", action="store_true", help="do not resume an unfinished run")
    backend.add_options(p)
    p.set_defaults(func=cmd_check_log)


def cmd_check_log(args: argparse.Namespace) -> int:
    sc = build(args)
    return run_and_report(sc, args.db, fresh=args.fresh)


def build(args: argparse.Namespace) -> Any:
    """The check-log scenario the flags describe.

    :raise InputError: the log is missing or corrupt (naming the entry where it breaks),
        or a flag's value is bad (naming the key).
    """
    with logwrites.open_log(args.log) as lg:
        digest = lg.hash
    fs: dict[str, Any] = {
        "type": args.fs,
        "disk_size": args.device_size,
        "mkfs_options": shlex.split(args.mkfs_options),
    }
    mount = [o for o in args.mount_options.split(",") if o]
    # The lab keeps the data mode apart (it decides how the guest mounts and what a
    # verdict means); fstests users write it as a mount option.
    fs["mount_options"] = [o for o in mount if not o.startswith("data=")]
    for o in mount:
        if o.startswith("data="):
            fs["data_mode"] = o.removeprefix("data=")
    data: dict[str, Any] = {
        # One run per log content: a resume never mixes two logs of one file name.
        "name": f"check-log-{digest[:12]}",
        "description": f"the dm-log-writes log {args.log}",
        "kind": "check-log",
        "log": str(args.log.resolve()),
        "fs": fs,
        "after_mark": args.after_mark,
        "after_entry": args.after_entry,
        "oracle": str(args.oracle.resolve()) if args.oracle else None,
        "crash": {
            "states": [{"kind": k.strip()} for k in args.states.split(",") if k.strip()],
            **({"max_states": args.max_states} if args.max_states else {}),
        },
        "check": {"guest": not args.host_only},
    }
    sets = [*args.set, *backend.overrides(args)]
    return scenario.build(args.log, data, scenario.seeded(sets, args.seed))
