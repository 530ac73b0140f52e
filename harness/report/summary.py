"""The end-of-run summary of ``scenario run``, for every experiment kind.

The header (scenario, run, resumed or not, time, store) and the closing line (what the
exit status means) are the same for every kind; the body between them is the kind's own
table, registered here by experiment class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.console import Console
from rich.table import Table

from harness import outcome
from harness.errors import EXIT_FINDING, EXIT_HARNESS
from harness.experiments import lifecycle
from harness.experiments.crash import CrashReplay
from harness.experiments.dropremount import DropRemount
from harness.experiments.faults import FSYNC_STEPS, DustScrub, FsyncEio
from harness.experiments.recovery import Recovery
from harness.experiments.workload import Workload
from harness.experiments.zfs.crash import ZfsCrash
from harness.experiments.zfs.scan import ZfsScan
from harness.report import io, patterns, recovery, zfs
from harness.report.markup import cells, esc
from harness.store.db import Store

Body = Callable[[Console, lifecycle.Report], None]


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
    BODIES[type(r.experiment)](console, r)
    if r.account.expected:
        console.print(
            "expected by design, not findings: " + counts_line(r.account.expected)
        )
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
        )
    if r.account.expect:
        return f"scenario results show {r.run_id}"
    if r.status == EXIT_FINDING:
        return f"[red]finding[/] — scenario results show {r.run_id}"
    if isinstance(r.experiment, CrashReplay) and not r.scenario.check.guest:
        return (
            "[green]no finding[/] by the host checker (check.guest=false: states were not"
            " mounted and fsync'd data was not verified)"
        )
    return "[green]no finding[/]"


def _crash_body(console: Console, r: lifecycle.Report) -> None:
    exp = r.experiment
    assert isinstance(exp, CrashReplay)
    with Store.open(r.db, create=False) as st:
        detail = st.run_detail(r.run_id)
        lines = patterns.summary_lines(st, r.run_id)
    rec = exp.recording
    console.print(
        f"log: {rec.get('log_entries')} entries, {rec.get('flushes')} flushes, "
        f"{rec.get('fuas')} FUA, {rec.get('marks')} marks; {r.items} crash states"
    )
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


def _eio_body(console: Console, r: lifecycle.Report) -> None:
    exp = r.experiment
    assert isinstance(exp, FsyncEio)
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    cols = ["filesystem", *FSYNC_STEPS, "new-file-fsync", "while faulty"]
    cols += ["fsync-after-restore", "after remount", "kernel", "verdict"]
    t = Table(*cols)
    for o in obs:
        row = o["metrics"].get("row", {})
        t.add_row(*cells(o["item"], *(row.get(c, "-") for c in cols[1:-1]), o["outcome"]))
    f = r.scenario.fault
    flap = f", flapping: up {f.up} s, down {f.down} s (fsync-2 after it came back)" if f.up else ""
    console.print(f"fault: {f.mode} after the first fsync{flap}")
    console.print(t)


def _dust_body(console: Console, r: lifecycle.Report) -> None:
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    t = Table("filesystem", "measured", "verdict")
    for o in obs:
        row = o["metrics"].get("row", {})
        t.add_row(*cells(o["item"], ", ".join(f"{k} {v}" for k, v in row.items()), o["outcome"]))
    console.print(f"{r.scenario.bad_blocks} bad 4 KiB blocks (dm-dust) under the data")
    console.print(t)


def _drop_body(console: Console, r: lifecycle.Report) -> None:
    exp = r.experiment
    assert isinstance(exp, DropRemount)
    with Store.open(r.db, create=False) as st:
        obs = st.observations(r.run_id)
    s = r.summary
    t = Table("filesystem @ sync point", "drop + remount", "crash replay", "agree", "verdict")
    for o in obs:
        m = o["metrics"]
        replay = (m.get("replay") or {}).get("outcome", "-")
        same = {True: "yes", False: "[red]NO[/]", None: "-"}[m.get("agree")]
        t.add_row(*cells(o["item"], m["drop"]["outcome"], replay), same, esc(o["outcome"]))
    console.print(
        f"fault: {r.scenario.fault.mode} from the return of sync points {s['drop_points']}"
    )
    console.print(t)
    if not s["cross_checked"]:  # cross_check = false (a measurement, not a crash model)
        return
    console.print(
        f"the two crash models agree on {s['agree']} of {s['cross_checked']} points"
        + (
            f"; [red]lab inconsistencies[/]: {esc(', '.join(s['lab_inconsistencies']))}"
            if s["lab_inconsistencies"]
            else ""
        )
    )


BODIES: dict[type[lifecycle.Experiment], Body] = {
    DropRemount: _drop_body,
    FsyncEio: _eio_body,
    DustScrub: _dust_body,
    CrashReplay: _crash_body,
    ZfsScan: zfs.print_scan_body,
    ZfsCrash: zfs.print_crash_body,
    Recovery: recovery.print_body,
    Workload: io.print_run_body,
}
