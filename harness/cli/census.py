"""``scenario campaign census [FILE]``: the year's crash-consistency fixes and the lab's
reach over them (harness/config/census.py), as a table, JSON or Markdown. Its own module:
campaign.py runs campaigns, this one only reads a file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from harness.campaign import nights
from harness.cli import ui
from harness.config import census as config_census
from harness.config.census import Reach
from harness.outcome import EXIT_OK
from harness.report import census as report
from harness.report.census import Meeting
from harness.report.markup import esc

console = ui.console()

_STYLE = {Reach.CAUGHT: "green", Reach.EXPRESSIBLE: "yellow", Reach.NOT_EXPRESSIBLE: "red"}


def register(csub: Any) -> None:
    p = csub.add_parser(
        "census",
        help="the year's crash-consistency fixes and the lab's reach over them",
        description="Every crash-consistency fix of the reachable Debian kernels, caught /"
        " expressible / not expressible, the reach ratios and the capabilities the rest"
        " need (docs/census.md). Exit 0; 2: a bad file.",
    )
    p.add_argument(
        "file",
        nargs="?",
        type=Path,
        default=config_census.DEFAULT_PATH,
        metavar="FILE",
        help=f"census TOML (default {config_census.DEFAULT_PATH})",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON document, for machines")
    out.add_argument("--markdown", action="store_true", help="the tables docs/census.md embeds")
    p.add_argument(
        "--reach",
        choices=[str(r) for r in Reach],
        default=None,
        help="list only the fixes of this reach (counts and ratios stay the whole file's)",
    )
    p.set_defaults(func=cmd_census)


def cmd_census(args: argparse.Namespace) -> int:
    census = config_census.load(args.file)
    reach = Reach(args.reach) if args.reach else None
    met = nights.nights(census)
    if args.json:
        print(json.dumps(report.to_json(census, met, reach), indent=2))
        return EXIT_OK
    if args.markdown:
        print(report.markdown(census, met), end="")
        return EXIT_OK
    console.print(_table(report.select(census, reach), met))
    console.print(report.summary(census), markup=False)
    needs = "; ".join(f"{k} {n} ({a} alone)" for k, n, a in census.needs_counts())
    console.print(f"needs (fixes naming it, alone): {needs}", markup=False)
    return EXIT_OK


def _table(fixes: list[config_census.Fix], met: dict[str, list[Meeting]]) -> Table:
    # Titles and reasons wrap (overflow fold) so the table fits the terminal's width.
    t = Table(box=box.SIMPLE_HEAD, expand=False)
    t.add_column("fix", overflow="fold", ratio=3)
    t.add_column("fs")
    t.add_column("area")
    t.add_column("fixed in / buggy", overflow="fold", ratio=1)
    t.add_column("reach", overflow="fold", ratio=3)
    t.add_column("nightly", overflow="fold", ratio=1)
    for f in fixes:
        head = f"{f.commit or '(no hash)'} {f.title}" + (f" ({f.fstests})" if f.fstests else "")
        pkgs = ", ".join(f.fixed_in) or "none"
        pkgs += "\nbuggy: " + (", ".join(f.buggy) or "-")
        reach = f"[{_STYLE[f.reach]}]{esc(report.reach_text(f))}[/]"
        night = f"\nnight {met[f.title][0].nights}" if met[f.title] else ""
        t.add_row(
            esc(head), esc(f.fs), esc(f.area), esc(pkgs), reach, esc((f.nightly or "-") + night)
        )
    return t
