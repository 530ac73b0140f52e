"""The end-of-run summary body of a run of one log's crash states (crash replay,
check-log): the log, the verdicts, what each application pattern's states left,
recovery times."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from harness import outcome
from harness.crashstate.onelog import OneLog
from harness.report import patterns, render
from harness.report.markup import esc
from harness.store.db import Store


class Report(Protocol):
    """What the body reads of the lifecycle's ``Report``."""

    run_id: str
    db: Path
    items: int
    summary: dict[str, Any]

    @property
    def experiment(self) -> object: ...

    @property
    def counts(self) -> Mapping[str, int]: ...


def print_body(console: Console, r: Report) -> None:
    exp = r.experiment
    assert isinstance(exp, OneLog)
    with Store.open(r.db, create=False) as st:
        detail = st.run_detail(r.run_id)
        lines = patterns.summary_lines(st, r.run_id)
    rec = exp.recording
    console.print(
        f"log: {rec.get('log_entries')} entries, {rec.get('flushes')} flushes, "
        f"{rec.get('fuas')} FUA, {rec.get('marks')} marks; {r.items} crash states"
    )
    if spread := r.summary.get("spread_from"):
        console.print(
            f"  spread over the {spread} the generators cut (crash.max_states; "
            f"--set crash.max_states={spread} checks them all)",
            markup=False,
        )
    if rc := r.summary.get("recovery_crash"):
        console.print(
            f"crash during recovery: {rc['states']} states cut from the recorded recovery of"
            f" {rc['parents']} sampled states, each judged as the state it recovers",
            markup=False,
        )
    if "reuse" in r.summary:
        console.print(f"states: {render.reuse_line(r.summary['reuse'])}", markup=False)
    t = Table("verdict", "states", "kind")
    counts = {k: v for k, v in r.counts.items() if v}
    for name in sorted(counts, key=lambda o: outcome.Outcome(o).severity):
        o = outcome.Outcome(name)
        kind = "finding" if outcome.is_finding(o) else "harness" if outcome.is_harness(o) else ""
        style = "red" if kind == "finding" else "yellow" if kind == "harness" else "green"
        t.add_row(f"[{style}]{name}[/]", str(counts[name]), kind)
    console.print(t)
    for line in lines:  # an application pattern: what the states left, per cell
        console.print(line, markup=False)
    if detail.recovery:
        rt = Table("recovery phase", "n", "mean ms", "p50 ms", "p95 ms", "max ms")
        for ph in detail.recovery:
            rt.add_row(
                esc(ph.phase),
                str(ph.n),
                *(f"{v * 1e3:.1f}" for v in (ph.mean, ph.p50, ph.p95, ph.max)),
            )
        console.print(rt)
