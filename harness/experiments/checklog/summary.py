"""The end-of-run summary of check-log: where its states started, then crash replay's."""

from __future__ import annotations

from rich.console import Console

from harness.crashstate.summary import print_body as crash_body
from harness.experiments import lifecycle


def print_body(console: Console, r: lifecycle.Report) -> None:
    if "start" in r.summary:
        console.print(f"crash states start {r.summary['start']}", markup=False)
    crash_body(console, r)
