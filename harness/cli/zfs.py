"""``scenario run`` for a ZFS scenario: progress on stderr, the summary on stdout."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.cli import ui
from harness.config.zfs import Experiment
from harness.experiments.zfs import crash
from harness.experiments.zfs import scan as run
from harness.report import zfs as report


def cmd_run(sc: Any, args: argparse.Namespace, db: Path) -> int:
    with ui.progress(sc.name) as progress:
        if sc.experiment is Experiment.CRASH:
            crashed = crash.execute(sc, db=db, seed=args.seed, progress=progress)
        else:
            result = run.execute(sc, db=db, seed=args.seed, progress=progress)
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a log file: do not fold the numbers
    if sc.experiment is Experiment.CRASH:
        return report.print_crash_summary(console, crashed)
    return report.print_summary(console, result)
