"""The end-of-run summary body of the workload kind: its cells, then each seed claim
and what this run measured about it."""

from __future__ import annotations

from rich.console import Console

from harness.experiments import lifecycle
from harness.report import query
from harness.report.io import print_io
from harness.report.markup import esc
from harness.store.db import Store


def print_run_body(console: Console, r: lifecycle.Report) -> None:
    """The end-of-run summary of a workload run: its cells, then each seed claim and what
    this run measured about it."""
    with Store.open(r.db, create=False) as st:
        result = query.grouped(st, "io", ["cell"], [r.run_id])
        obs = st.observations(r.run_id)
    if result.groups:
        print_io(console, result)
    for o in obs:
        if o["outcome"] != "consistent":
            console.print(
                f"[yellow]{esc(o['item'])}: {esc(o['outcome'])}[/]"
                f" {esc(o['metrics'].get('error', ''))}"
            )
    from harness.report.ioclaims import claims

    for c in claims([o for o in obs if "derived" in o["metrics"]]):
        console.print(
            f"seed {esc(c['seed'])}: {esc(c['claim'])}\n  [bold]this run:[/] {esc(c['measured'])}"
        )
