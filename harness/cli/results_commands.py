"""What the ``scenario results`` actions do: open the store, read, print a table or the
JSON. Their parser (every action and its options) is ``results.py``'s, which hands each
action its function here; apart so that each reads in one sitting."""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
from types import FrameType
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness import outcome
from harness.cli import ui
from harness.errors import HarnessError, InputError
from harness.paths import default_db
from harness.report import campaign_diff, query, render
from harness.report import diff as rdiff
from harness.report.markup import esc
from harness.store.db import Store


def _open(args: argparse.Namespace) -> Store:
    return Store.open(args.db or default_db(), create=False)


SHOW_WIDTH = 100


def _console() -> Console:
    return ui.console()


# --- runs ---------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> int:
    with _open(args) as store:
        rows = store.runs(args.limit)
        path = store.path
    console = _console()
    if args.json:
        console.out(json.dumps({"db": str(path), "runs": [r.to_json() for r in rows]}, indent=2))
        return 0
    if not rows:
        console.print(f"no runs in {path}", markup=False)
        return 0
    t = Table(title=f"runs in {esc(path)}", title_justify="left", box=box.SIMPLE_HEAD)
    # The id and the time never wrap: a person copies the id into `results show`.
    t.add_column("id", no_wrap=True)
    t.add_column("scenario", overflow="fold")
    t.add_column("started", no_wrap=True)
    t.add_column("duration", no_wrap=True)
    t.add_column("accel", no_wrap=True)
    t.add_column("kernel", overflow="fold")
    t.add_column("outcomes", no_wrap=True)
    t.add_column("status", no_wrap=True)
    for r in rows:
        t.add_row(
            esc(r.id),
            esc(r.scenario),
            render.local_time(r.started_at),
            render.duration(r),
            esc(r.accelerator or "-"),
            esc(r.guest_kernel or "-"),
            render.account_markup(r, "\n") or "-",
            render.status_markup(r),
        )
    console.print(t)
    return 0


# --- show ---------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    from harness.triage.report import triaged

    with _open(args) as store:
        detail = store.run_detail(args.run)
    reports = triaged(detail.run.id)
    # Piped (`| less`), a run's page fits 100 columns: its long values (a scenario's
    # description, a workload file's text) wrap in their cells instead of widening the
    # table to 1,300 characters; a terminal's own width wins, and COLUMNS.
    console = ui.console(piped=SHOW_WIDTH)
    if args.json:
        console.out(json.dumps({**detail.to_json(), "triage": list(map(str, reports))}, indent=2))
        return 0
    render.print_detail(console, detail)
    for path in reports:
        # The folder's name is the state's id made one path component (a search
        # state's holds a slash): the id to type is the one the report keeps.
        state = json.loads((path.parent / "triage.json").read_text())["state"]["id"]
        console.print(f"triage of {state}: {path}", markup=False, soft_wrap=True)
    return 0


# --- formatting ---------------------------------------------------------------------


# --- bugs ---------------------------------------------------------------------------


def cmd_bugs(args: argparse.Namespace) -> int:
    from harness.report import search

    with _open(args) as store:
        found = search.clusters(store, args.run)
    console = _console()
    if args.json:
        console.out(json.dumps([c.to_json() for c in found], indent=2))
        return 0
    search.print_clusters(console, found)
    return 0


# --- table --------------------------------------------------------------------------


def cmd_table(args: argparse.Namespace) -> int:
    k = query.kind(args.kind)
    by = query.parse_by(args.by) if args.by is not None else list(k.default_by)
    with _open(args) as store:
        result = query.grouped(store, k.name, by, args.run)
        path = store.path
    console = _console()
    if args.json:
        console.out(json.dumps({"db": str(path), **result.to_json()}, indent=2))
        return 0
    if not result.groups:
        console.print(f"table {k.name}: {k.empty_hint} (in {path})", markup=False)
        return 0
    (k.printer or render.print_grouped)(console, result)
    return 0


# --- export -------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    if args.junit is not None:
        return _export_junit(args)
    what = "observations" if args.observations else "states"
    export = query.export_observations if args.observations else query.export_states
    with _open(args) as store:
        columns, rows = export(store, args.runs)
        runs = [store.run(r).to_json() for r in dict.fromkeys(r["run_id"] for r in rows)]
    out = args.output.open("w", newline="") if args.output else None
    try:
        stream: Any = out or sys.stdout
        if args.format == "json":
            json.dump({"runs": runs, what: rows}, stream, indent=2)
            stream.write("\n")
        else:
            w = csv.DictWriter(stream, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    finally:
        if out:
            out.close()
    if args.output:
        _console().print(
            f"{len(rows)} {what.replace('states', 'crash states')} -> {args.output}", markup=False
        )
    return 0


def _export_junit(args: argparse.Namespace) -> int:
    from harness.report import junit

    clash = [o for o, v in (("--format", args.format), ("--observations", args.observations),
                            ("--output", args.output)) if v]  # fmt: skip
    if clash:
        raise InputError(f"--junit writes its own file: {', '.join(clash)} cannot go with it")
    dest = junit.destination(args.junit)
    with _open(args) as store:
        suites = junit.suites(store, args.runs)
    junit.write(junit.to_xml(suites), dest)
    if dest is not None:
        _console().print(junit.summary_line(suites, dest), markup=False)
    return 0


# --- diff and check -----------------------------------------------------------------


def cmd_diff(args: argparse.Namespace) -> int:
    if args.by == "cluster":
        return _diff_clusters(args)
    if args.run_b is None or args.more:
        raise InputError(
            "results diff takes two runs or two campaigns",
            hint="more, or one campaign over several kernels: --by cluster",
        )
    baseline = rdiff.load_baseline(args.baseline) if args.baseline else None
    with _open(args) as store:
        ids = campaign_diff.campaign_ids(store, args.run_a, args.run_b)
        d: rdiff.RunDiff | campaign_diff.CampaignDiff
        if ids is None:
            d = rdiff.diff_runs(store, args.run_a, args.run_b)
            runs_b = [d.b.id]
        else:
            d = campaign_diff.diff_campaigns(store, *ids)
            runs_b = [p.diff.b.id for p in d.pairs] + [str(u.run_id) for u in d.only_b if u.run_id]
        reports = [rdiff.check_run(store, r, baseline) for r in runs_b] if baseline else []
    console = _console()
    if args.json:
        out = d.to_json()
        if reports:
            checks = [r.to_json() for r in reports]
            out["check"] = checks[0] if ids is None else checks
        console.out(json.dumps(out, indent=2))
    else:
        if isinstance(d, rdiff.RunDiff):
            render.print_diff(console, d)
        else:
            render.print_campaign_diff(console, d)
        for report in reports:
            render.print_check(console, report)
    return outcome.status(finding=any(r.regressions for r in reports))


def _diff_clusters(args: argparse.Namespace) -> int:
    from harness.report import cluster_diff

    if args.baseline:
        raise InputError("--baseline checks runs: not with --by cluster")
    names = [args.run_a, *([args.run_b] if args.run_b else []), *args.more]
    with _open(args) as store:
        d = cluster_diff.diff_clusters(store, names)
    console = _console()
    if args.json:
        console.out(json.dumps(d.to_json(), indent=2))
    else:
        cluster_diff.print_diff(console, d)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    baseline = rdiff.load_baseline(args.baseline)
    with _open(args) as store:
        reports = [rdiff.check_run(store, r, baseline, strict=args.strict) for r in args.runs]
    console = _console()
    if args.json:
        console.out(
            json.dumps(
                {"baseline": str(args.baseline), "runs": [r.to_json() for r in reports]}, indent=2
            )
        )
    else:
        for r in reports:
            render.print_check(console, r)
    return outcome.status(finding=any(r.regressions for r in reports))


# --- plot ---------------------------------------------------------------------------


def cmd_plot(args: argparse.Namespace) -> int:
    from harness.report import plots

    charts = query.plots()
    if args.chart not in charts:
        raise InputError(
            f"argument chart: invalid choice: {args.chart!r}",
            hint="choose from " + ", ".join(charts),
        )
    chart = charts[args.chart]
    out = args.output or default_db().parent / f"{args.chart}.png"
    runs = [args.run] if args.run else []
    by = query.parse_by(args.by) if args.by is not None else list(chart.default_by)
    with _open(args) as store:
        try:
            if chart.needs_run and not args.run:
                raise InputError(f"plot {args.chart} needs a RUN", hint="scenario results runs")
            chart.draw(store, by, out, runs)
        except plots.NoData as e:
            _console().print(f"nothing to plot: {e}", markup=False)
            return 0
    _console().print(f"wrote {out}", markup=False)
    return 0


# --- serve --------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.report import serve
    from harness.report.serve_meta import DASHBOARD

    db = args.db or default_db()
    # SIGTERM (a service manager, a test) stops it like Ctrl-C: datasette is stopped and
    # the snapshot removed on the way out.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with serve.start_server(db, args.port) as srv:
            # print, flushed: a script reads the URL from a pipe
            print(f"serving a read-only snapshot of {db}", flush=True)
            print(f"  {srv.url}{DASHBOARD.lstrip('/')}  (the charts)", flush=True)
            print(f"  {srv.url}{srv.db_name}  (canned queries listed there)", flush=True)
            print(f"  {srv.url}  Ctrl-C to stop", flush=True)
            status = srv.process.wait()
    except KeyboardInterrupt:
        print("stopped", flush=True)
        return 0
    if status != 0:
        raise HarnessError(f"datasette exited with status {status}")
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
