"""The end-of-run summary of ``scenario run``, for every experiment kind.

The header (scenario, run, resumed or not, time, store) and the closing line (what the
exit status means) are the same for every kind; the body between them is the kind's own
table, named by its kind's record (``harness/experiments/registry.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console

from harness.errors import EXIT_FINDING, EXIT_HARNESS
from harness.experiments import lifecycle, registry
from harness.report.markup import esc


def counts_line(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{o} {n}" for o, n in counts.items())


def print_summary(console: Console, r: lifecycle.Report) -> None:
    console.print(
        f"[bold]{esc(r.scenario.name)}[/]  run [bold]{esc(r.run_id)}[/]"
        + (f"  (resumed: {r.earlier} of {r.items} done earlier)" if r.resumed else "")
        + f"  {r.seconds:.0f} s  store: {esc(r.db)}"
    )
    if r.not_resumed:
        console.print(f"[yellow]{esc(r.not_resumed)}[/]")
    registry.body(type(r.experiment))(console, r)
    if r.account.expected:
        waived = ", ".join(sorted(set(r.account.waived.values())))
        why = f"expected, {waived} waived the promise" if waived else "expected by design"
        console.print(f"{esc(why)}, not findings: " + counts_line(r.account.expected))
    if r.account.control_failed:
        console.print(
            f"[red]{esc(r.account.control_failed)}[/] (scenario expects {r.scenario.expect})"
        )
    elif getattr(r.scenario, "expect", None):
        console.print(f"[green]control passed[/]: expected {r.scenario.expect}")
    console.print(closing_line(r))


def closing_line(r: lifecycle.Report) -> str:
    if r.status == EXIT_HARNESS:
        return (
            "[yellow]harness failure[/]: some items could not be checked (hang, panic, lab "
            "error); this says nothing about the filesystem"
            + ("; run it again to check them" if r.experiment.retries_harness_items else "")
        )
    if r.account.expect:
        return f"scenario results show {r.run_id}"
    if r.status == EXIT_FINDING:
        return f"[red]finding[/] — scenario results show {r.run_id}"
    caveat = r.experiment.caveat()
    return "[green]no finding[/]" + (f" {esc(caveat)}" if caveat else "")
