"""The end-of-run summary bodies of the ZFS kind: a scan's times, repairs and fits
against fill; a pool crash run's states by outcome."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.experiments import lifecycle
from harness.experiments.zfs.crash import ZfsCrash
from harness.experiments.zfs.scan import ZfsScan, overhead
from harness.outcome import Outcome
from harness.report.markup import cells, esc
from harness.report.zfs import mib


def print_scan_body(console: Console, r: lifecycle.Report) -> None:
    """The end-of-run table of a scrub or resilver run."""
    exp = r.experiment
    assert isinstance(exp, ZfsScan)
    sc = r.scenario
    console.print(
        f"{sc.experiment}, fault {sc.fault.kind} on disk(s) {list(sc.fault.disks)} "
        f"({sc.fault.when})",
        markup=False,
    )
    if exp.measurements:
        m0 = exp.measurements[0]
        console.print(
            f"ZFS {m0.zfs_version}, guest kernel {m0.guest_kernel}, {m0.accelerator}; "
            f"event clock tick {m0.tick_ns / 1e6:g} ms",
            markup=False,  # versions as the guest printed them
        )
    t = Table(box=box.SIMPLE_HEAD)
    for col in (
        "cell",
        "rep",
        "fill %",
        "seconds",
        "scans",
        "status s",
        "wall s",
        "MB/s",
        "examined MiB",
        "repaired MiB",
        "cksum err",
        "data err",
        "pool",
        "verdict",
    ):
        t.add_column(col, justify="left" if col in ("cell", "pool", "verdict") else "right")
    for m in exp.measurements:
        s = m.scan
        cksum = sum(v.checksum for v in m.status.leaves())
        bps = m.bytes_per_second
        verdict = str(m.outcome)
        style = "green" if m.outcome is Outcome.CONSISTENT else "red"
        if m.outcome is Outcome.DATA_LOSS and m.expected_loss:
            style, verdict = "yellow", "data errors (expected)"
        t.add_row(
            esc(m.cell.label().replace(f" fill {m.cell.fill:g}%", "")),
            str(m.repetition + 1),
            f"{m.fill:.1f}",
            f"{m.seconds:.3f}" + ("" if m.seconds_source == "events" else " (status)"),
            " ".join("-" if w.seconds is None else f"{w.seconds:.2f}" for w in m.windows) or "-",
            "-" if s.status_seconds is None else str(s.status_seconds),
            f"{m.wall_seconds:.3f}",
            "-" if bps is None else f"{bps / 1e6:.1f}",
            mib(s.examined),
            mib(s.processed),
            str(cksum),
            str(m.status.error_count),
            esc(m.status.state),
            f"[{style}]{esc(verdict)}[/]",
        )
    console.print(t)
    if exp.measurements:
        oh = overhead(exp.measurements)
        console.print(
            "mean seconds per repetition: " + ", ".join(f"{k} {v:.1f}" for k, v in oh.items())
        )
    print_sweep_fits(console, r.summary)


def print_sweep_fits(console: Console, summary: dict[str, Any]) -> None:
    """The sweep as a whole: scan time against bytes per layout, spread, harness share."""
    for layout, f in summary.get("fits", {}).items():
        console.print(
            f"{layout}: {f['MB/s']} MB/s + {f['fixed_seconds']:.2f} s fixed "
            f"(R² {f['r2']:.3f}, n {f['n']})",
            markup=False,
        )
    for cell, spread in summary.get("spread_flagged", {}).items():
        console.print(
            f"[yellow]spread[/] {esc(cell)}: {spread['min']:.2f}..{spread['max']:.2f} s "
            f"around {spread['median']:.2f} s: repeat it on a quieter host"
        )
    if eta := summary.get("eta_abs_error_seconds"):
        console.print(
            f"zpool status's ETA was off by {eta['median']} s (median; max {eta['max']} s,"
            f" {eta['n']} estimates)"
        )
    if "harness_per_scan_second" in summary:
        console.print(
            f"harness time per second of scan: {summary['harness_per_scan_second']} s"
            " (boot, import, copies, collection)"
        )


def print_crash_body(console: Console, r: lifecycle.Report) -> None:
    """The end-of-run table of a pool's crash states."""
    exp = r.experiment
    assert isinstance(exp, ZfsCrash)
    sc = r.scenario
    rec = exp.recording
    console.print(f"crash states of {sc.pool.layout} x{sc.pool.disks}: {len(exp.states)}")
    console.print(
        f"ZFS {rec.zfs_version}, guest kernel {rec.guest_kernel}, {rec.accelerator}; recording "
        + ", ".join(f"{k} {v:.1f}s" for k, v in rec.seconds.items()),
        markup=False,  # versions as the guest printed them
    )
    t = Table(box=box.SIMPLE_HEAD)
    for col in (
        "state",
        "model",
        "mark",
        "cuts",
        "import s",
        "scrub s",
        "repaired",
        "cksum",
        "data err",
        "files",
        "verdict",
    ):
        t.add_column(
            col, justify="left" if col in ("state", "model", "mark", "cuts", "verdict") else "right"
        )
    for s in exp.states:
        c = exp.results.get(s.id)
        if c is None:
            continue
        v = c.verify or {}
        style = "green" if c.outcome is Outcome.CONSISTENT else "red" if s.honest else "dim"
        t.add_row(
            *cells(
                s.id,
                s.generator if s.honest else f"{s.generator} ({s.model})",
                s.mark.removeprefix("crashlab:"),
                " ".join(map(str, s.cuts)),
            ),
            f"{c.phases.get('mount', 0.0):.2f}",
            f"{c.phases.get('fsck_after', 0.0):.2f}" if "fsck_after" in c.phases else "-",
            str(c.repaired),
            str(c.checksum_errors),
            str(c.status.error_count) if c.status else "-",
            f"{v.get('checked', 0) - len(v.get('missing', [])) - len(v.get('mismatched', []))}"
            f"/{v.get('checked', 0)}"
            if v
            else "-",
            f"[{style}]{esc(c.outcome)}[/]" + ("" if s.honest else " [dim](not counted)[/]"),
        )
    console.print(t)
    counts = r.account.counts
    console.print(
        "verdicts: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())), markup=False
    )
    if exp.lying:
        lying = r.account.expected
        console.print(
            f"{len(exp.lying)} states modelled disks that lose acknowledged writes "
            "(crash.torn_model = any); their verdicts are not counted as findings: "
            + ", ".join(f"{k} {n}" for k, n in sorted(lying.items())),
            markup=False,
        )
