"""``scenario results``: look at stored runs, as rich tables or as JSON.

The JSON carries at least what the tables show a person (and more: every state, every
check), so a script never has to scrape a table.
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import sys
from pathlib import Path
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


def register(sub: Any) -> None:
    common = _common()
    p = sub.add_parser("results", help="list and inspect stored runs")
    rsub = p.add_subparsers(dest="results_command", metavar="ACTION", required=True)
    _add_runs(rsub, common)
    from harness.report import zfs as report

    report.register(rsub, common)
    _add_tables(rsub, common)
    _add_diffs(rsub, common)
    _add_plot(rsub, common)
    _add_serve(rsub)


def _common() -> argparse.ArgumentParser:
    """The options every `results` action takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        type=Path,
        default=None,
        metavar="PATH",
        help="results database (default: $CRASHLAB_RESULTS/lab.sqlite,"
        " i.e. results/lab.sqlite in the repo)",
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")
    return common


def _add_runs(rsub: Any, common: argparse.ArgumentParser) -> None:
    runs = rsub.add_parser("runs", parents=[common], help="list recent runs")
    runs.add_argument(
        "--limit",
        type=_positive,
        default=20,
        metavar="N",
        help="how many runs, newest first (default 20)",
    )
    runs.set_defaults(func=cmd_runs)

    show = rsub.add_parser("show", parents=[common], help="one run in detail")
    show.add_argument("run", metavar="RUN", help="run id, or a unique prefix of one")
    show.set_defaults(func=cmd_show)


def _add_tables(rsub: Any, common: argparse.ArgumentParser) -> None:
    table = rsub.add_parser(
        "table",
        parents=[common],
        help="grouped statistics, e.g. `table recovery --by fs,data_mode`",
        description="Grouped statistics: n, mean, stdev, min, p50, p95, max per group (and"
        " split, e.g. recovery phase), with counts per outcome. Group by any run column"
        " (scenario, fs, data_mode, kernel, accelerator, host, seed, run, ...), any stored scenario"
        " parameter (workload.ops, fs.disk_size, ...) or the table's own fields"
        " (recovery: generator, outcome, phase).",
    )
    table.add_argument("kind", metavar="KIND", help="table kind: recovery, resilver, ...")
    table.add_argument(
        "--by", default=None, metavar="FIELD,...", help="group by these fields (comma-separated)"
    )
    table.add_argument(
        "--run", action="append", default=[], metavar="RUN", help="only these runs (repeatable)"
    )
    table.set_defaults(func=cmd_table)

    bugs = rsub.add_parser(
        "bugs",
        parents=[common],
        help="a search run's findings grouped by symptom, smallest workload first",
        description="Cluster a run's findings by symptom (filesystem, outcome, oracle rule,"
        " the broken name's role, op classes); each cluster lists its workload and state"
        " counts and its smallest workload.",
    )
    bugs.add_argument("run", metavar="RUN", help="run id, or a unique prefix of one")
    bugs.set_defaults(func=cmd_bugs)

    export = rsub.add_parser(
        "export",
        parents=[common],
        help="every crash state of some runs as CSV or JSON; runs or campaigns as JUnit XML",
    )
    export.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run ids or unique prefixes (with --junit also campaign ids or names)",
    )
    export.add_argument("--format", choices=("csv", "json"), default=None, help="default: csv")
    export.add_argument(
        "--junit",
        metavar="PATH",
        default=None,
        help="JUnit XML instead (PATH, or - for stdout): a testsuite per run or campaign, a"
        " testcase per finding cluster, harness outcome and clean run (per element of a"
        " campaign); for CI dashboards",
    )
    export.add_argument(
        "--observations",
        action="store_true",
        help="the runs' observations instead: the pattern class of each (state, file), and"
        " the items of the recovery, faults and ZFS kinds, their cell and metrics as columns",
    )
    export.add_argument(
        "-o", "--output", type=Path, default=None, metavar="FILE", help="default: stdout"
    )
    export.set_defaults(func=cmd_export)


def _add_diffs(rsub: Any, common: argparse.ArgumentParser) -> None:
    diff = rsub.add_parser(
        "diff",
        parents=[common],
        help="two runs state by state, or two campaigns run by run: outcome changes, "
        "recovery-time ratios; --by cluster: search findings per cluster and kernel",
        description="Match the crash states of RUN_A and RUN_B by id (e.g. one scenario under"
        " two guest kernels). Given two campaign ids, pair their runs by element (scenario,"
        " --set items but the kernel, seed) and diff each pair; list runs only one has."
        " With --by cluster: the findings of search runs grouped by symptom as `results"
        " bugs` groups them, one column per run and per kernel of each campaign (two or"
        " more runs or campaigns, or one campaign over several kernels), each cluster's"
        " state to triage per column where it appears."
        " Exit 0; with --baseline, exit 1 if RUN_B (every run of CAMPAIGN_B) regresses.",
    )
    diff.add_argument("run_a", metavar="RUN_A|CAMPAIGN_A")
    diff.add_argument("run_b", nargs="?", metavar="RUN_B|CAMPAIGN_B")
    diff.add_argument("more", nargs="*", metavar="RUN|CAMPAIGN", help="--by cluster: more columns")
    diff.add_argument(
        "--by",
        choices=("state", "cluster"),
        default="state",
        help="state (default): states by id, runs by element; cluster: search findings",
    )
    diff.add_argument("--baseline", type=Path, metavar="FILE", help="also check RUN_B's runs")
    diff.set_defaults(func=cmd_diff)

    check = rsub.add_parser(
        "check",
        parents=[common],
        help="exit 1 if a run regresses against a baseline of expected outcomes",
        description="Check runs against a baseline file (TOML or JSON: [scenarios.NAME]"
        " allowed = [outcomes], max = {outcome = count}). Exit 0: within the baseline;"
        " 1: a run regressed (an outcome not allowed, a count above its max, or an"
        " unfinished run); 2: bad input.",
    )
    check.add_argument("runs", nargs="+", metavar="RUN")
    check.add_argument("--baseline", type=Path, required=True, metavar="FILE")
    check.add_argument(
        "--strict", action="store_true", help="a scenario missing from the baseline regresses"
    )
    check.set_defaults(func=cmd_check)


def _add_plot(rsub: Any, common: argparse.ArgumentParser) -> None:
    plot = rsub.add_parser(
        "plot",
        parents=[common],
        help="PNG charts: recovery --by F,..., crashmap RUN, resilver|scrub --by layout,fill,"
        " recovery-vs-size [RUN], resilver-progress RUN,"
        " patterns --by fs,mount_options,pattern, io --by fs,data_mode",
    )
    # The charts are the kinds' (their records' ``plots``): checked when one is drawn, so
    # building the parser loads no kind.
    plot.add_argument("chart", metavar="CHART", help="a kind's chart (an unknown name lists them)")
    plot.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help="the run (crashmap and resilver-progress need one; the others: default all)",
    )
    plot.add_argument("--by", default=None, metavar="FIELD,...")
    plot.add_argument("-o", "--output", type=Path, default=None, metavar="PNG")
    plot.set_defaults(func=cmd_plot)


def _add_serve(rsub: Any) -> None:
    serve = rsub.add_parser(
        "serve",
        help="browse the store with datasette on 127.0.0.1 (read-only snapshot)",
        description="Serve a read-only snapshot of the store with datasette, bound to"
        " 127.0.0.1 only: a dashboard of the lab's charts (/-/dashboards/lab), a canned"
        " query per `results table` kind and for crash verdicts, search clusters and"
        " campaigns, and column descriptions. The snapshot is taken at start: restart to"
        " see newer results.",
    )
    serve.add_argument(
        "--db", type=Path, default=None, metavar="PATH", help="results database (see `runs`)"
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=8001,
        metavar="N",
        help="TCP port on 127.0.0.1 (default 8001; 0: any free port)",
    )
    serve.set_defaults(func=cmd_serve)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {n}")
    return n


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1 to 65535, or 0 for any free port: {n}")
    return n


def _open(args: argparse.Namespace) -> Store:
    return Store.open(args.db or default_db(), create=False)


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
    console = _console()
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
