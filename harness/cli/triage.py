"""``scenario explain STATE-ID``: what each write of a crash state is on the filesystem."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness import paths
from harness.cli import ui
from harness.triage import explain

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="name each block a crash state's writes touch: journal transaction, inode "
        "table, file and offset ... (ext2/3/4; host userspace tools on the image)",
    )
    p.add_argument("state_id", metavar="STATE-ID")
    p.add_argument(
        "--entries",
        metavar="FIRST..LAST",
        help="these log entries (default: the writes the state drops or tears, else those "
        "after its last mark)",
    )
    p.add_argument("--db", type=Path, default=None)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    span = explain.parse_entries(args.entries) if args.entries else None
    x = explain.explain_state(args.state_id, args.db or paths.default_db(), span)
    console.print(f"crash state {x.state.describe()} of run {x.run_id}", markup=False)
    console.print(f"{x.which}:", markup=False)
    for line in x.explanation.lines() or ["(no writes)"]:
        console.print(line, markup=False, soft_wrap=True)
    return 0
