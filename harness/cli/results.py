"""``scenario results``: look at stored runs, as rich tables or as JSON.

The JSON carries at least what the tables show a person (and more: every state, every
check), so a script never has to scrape a table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.errors import EXIT_FINDING, HarnessError, InputError
from harness.outcome import Outcome, is_finding, is_harness
from harness.paths import default_db
from harness.report import diff as rdiff
from harness.report import query
from harness.store.db import RunDetail, RunRow, Store

# Rows of non-consistent states printed before pointing at --json for the rest.
SHOWN_STATES = 50


def register(sub: Any) -> None:
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

    p = sub.add_parser("results", help="list and inspect stored runs")
    rsub = p.add_subparsers(dest="results_command", metavar="ACTION", required=True)

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

    from harness.report import zfs as report

    report.register(rsub, common)

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

    export = rsub.add_parser(
        "export", parents=[common], help="every crash state of some runs as CSV or JSON"
    )
    export.add_argument("runs", nargs="+", metavar="RUN", help="run ids or unique prefixes")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument(
        "-o", "--output", type=Path, default=None, metavar="FILE", help="default: stdout"
    )
    export.set_defaults(func=cmd_export)

    diff = rsub.add_parser(
        "diff",
        parents=[common],
        help="two runs state by state: outcome changes, recovery-time deltas",
        description="Match the crash states of RUN_A and RUN_B by id (e.g. one scenario under"
        " two guest kernels). Exit 0; with --baseline, exit 1 if RUN_B regresses against it.",
    )
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--baseline", type=Path, metavar="FILE", help="also check RUN_B")
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

    plot = rsub.add_parser(
        "plot",
        parents=[common],
        help="PNG charts: recovery --by F,..., crashmap RUN, resilver|scrub --by layout,fill",
    )
    plot.add_argument("chart", choices=("recovery", "crashmap", "resilver", "scrub"))
    plot.add_argument("run", nargs="?", metavar="RUN", help="the run (crashmap)")
    plot.add_argument("--by", default=None, metavar="FIELD,...")
    plot.add_argument("-o", "--output", type=Path, default=None, metavar="PNG")
    plot.set_defaults(func=cmd_plot)

    serve = rsub.add_parser(
        "serve",
        help="browse the store with datasette on 127.0.0.1 (read-only snapshot)",
        description="Serve a read-only snapshot of the store with datasette, bound to"
        " 127.0.0.1 only, with canned queries (recovery by fs and data mode, findings per"
        " run, resilver by layout and fill, ...) and column descriptions. The snapshot is"
        " taken at start: restart to see newer results.",
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
    # soft_wrap: long JSON strings must never be broken by the console's line width.
    console = Console(highlight=False, soft_wrap=True)
    # Piped into a file or `less`, rich assumes 80 columns and folds ids and kernel
    # versions into unreadable slivers; long lines are the lesser evil there.
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 160
    return console


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
        console.print(f"no runs in {path}")
        return 0
    t = Table(title=f"runs in {path}", title_justify="left", box=box.SIMPLE_HEAD)
    # The id and the time never wrap: a person copies the id into `results show`.
    t.add_column("id", no_wrap=True)
    t.add_column("scenario", overflow="fold")
    t.add_column("started", no_wrap=True)
    t.add_column("duration", no_wrap=True)
    t.add_column("accel", no_wrap=True)
    t.add_column("kernel", overflow="fold")
    t.add_column("states", no_wrap=True)
    t.add_column("status", no_wrap=True)
    for r in rows:
        t.add_row(
            r.id,
            r.scenario,
            _local(r.started_at),
            _duration(r),
            r.accelerator or "-",
            r.guest_kernel or "-",
            _counts_markup(r.outcome_counts, "\n") or "-",
            _status_markup(r),
        )
    console.print(t)
    return 0


# --- show ---------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as store:
        detail = store.run_detail(args.run)
    console = _console()
    if args.json:
        console.out(json.dumps(detail.to_json(), indent=2))
        return 0
    _print_detail(console, detail)
    return 0


def _print_detail(console: Console, d: RunDetail) -> None:
    r = d.run
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for key, value in (
        ("run", r.id),
        ("scenario", f"{r.scenario} ({r.kind})"),
        ("fs", r.fs or "-"),
        ("status", _status_markup(r)),
        ("started", _local(r.started_at)),
        ("duration", _duration(r)),
        ("seed", "-" if r.seed is None else str(r.seed)),
        ("host", r.host or "-"),
        ("accelerator", r.accelerator or "-"),
        ("guest kernel", r.guest_kernel or "-"),
        ("qemu", r.qemu_version or "-"),
        ("image", r.image_hash or "-"),
        ("tools", ", ".join(f"{k} {v}" for k, v in sorted(r.tool_versions.items())) or "-"),
        ("outcomes", _counts_markup(r.outcome_counts) or "no states checked"),
    ):
        head.add_row(key, value)
    # The summary repeats the counts for a finished run; show only what it adds (an
    # error message of a failed run, say).
    extra = {k: v for k, v in (r.summary or {}).items() if k != "outcome_counts"}
    for key, value in sorted(_flatten(extra).items()):
        head.add_row(key, str(value))
    console.print(head)

    params = Table(title="parameters", title_justify="left")
    params.add_column("key")
    params.add_column("value", overflow="fold")
    for key, value in sorted(_flatten(r.params).items()):
        params.add_row(key, json.dumps(value))
    if r.params:
        console.print(params)

    if d.recovery:
        rec = Table(title="recovery time (seconds)", title_justify="left")
        rec.add_column("phase")
        for col in ("n", "mean", "p50", "p95", "max"):
            rec.add_column(col, justify="right")
        for ph in d.recovery:
            rec.add_row(
                ph.phase, str(ph.n), *(f"{v:.3f}" for v in (ph.mean, ph.p50, ph.p95, ph.max))
            )
        console.print(rec)

    flagged = [s for s in d.states if s.outcome not in (Outcome.CONSISTENT, None)]
    unchecked = sum(1 for s in d.states if s.outcome is None)
    if flagged:
        st = Table(title="states that were not consistent", title_justify="left")
        for col in ("state", "outcome", "generator", "last mark", "description", "checks"):
            st.add_column(col, overflow="fold")
        for s in flagged[:SHOWN_STATES]:
            st.add_row(
                s.id,
                _outcome_markup(s.outcome or ""),
                s.generator,
                s.last_mark or "-",
                s.description,
                ", ".join(
                    f"{c.stage}/{c.checker}: {c.outcome}"
                    for c in s.checks
                    if c.outcome != Outcome.CONSISTENT
                ),
            )
        console.print(st)
        if len(flagged) > SHOWN_STATES:
            console.print(f"… and {len(flagged) - SHOWN_STATES} more: use --json for all")
    elif d.states:
        console.print("every checked state was consistent")
    if unchecked:
        console.print(f"{unchecked} state(s) recorded but not checked (resume the run)")


# --- formatting ---------------------------------------------------------------------


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict) or not d:
        return {prefix: d} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _local(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")


def _duration(r: RunRow) -> str:
    seconds = r.duration
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def _style(outcome: str) -> str:
    try:
        o = Outcome(outcome)
    except ValueError:
        return "magenta"
    if is_finding(o):
        return "bold red"
    if is_harness(o):
        return "yellow"
    return "green" if o is Outcome.CONSISTENT else "dim"


def _outcome_markup(outcome: str) -> str:
    return f"[{_style(outcome)}]{outcome}[/]"


def _counts_markup(counts: Mapping[str, int], sep: str = "  ") -> str:
    return sep.join(f"[{_style(o)}]{o} {n}[/]" for o, n in counts.items())


def _status_markup(r: RunRow) -> str:
    colour = {"done": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}
    return f"[{colour.get(str(r.status), 'white')}]{r.status}[/]"


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
        console.print(f"table {k.name}: {k.empty_hint} (in {path})")
        return 0
    print_grouped(console, result)
    return 0


def print_grouped(console: Console, result: query.GroupedTable) -> None:
    by = result.by or ("all",)

    def key_cells(key: tuple[Any, ...]) -> list[str]:
        return [_cell(v) for v in key] if result.by else ["all"]

    if result.outcomes:
        t = Table(
            title=f"{result.kind.name}: outcomes by {', '.join(by)}",
            title_justify="left",
            box=box.SIMPLE_HEAD,
        )
        for f in by:
            t.add_column(f)
        t.add_column("n", justify="right")
        for o in result.outcomes:
            t.add_column(_outcome_markup(o), justify="right")
        for g in result.groups:
            t.add_row(
                *key_cells(g.key),
                str(g.counted),
                *(str(g.counts.get(o, "")) for o in result.outcomes),
            )
        console.print(t)
    unit = result.kind.unit
    t = Table(
        title=f"{result.kind.name}: {result.kind.value} by {', '.join(by)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for f in by:
        t.add_column(f)
    if result.kind.split:
        t.add_column(result.kind.split)
    for col in ("n", "mean", "stdev", "min", "p50", "p95", "max"):
        t.add_column(col if col == "n" else f"{col} {unit}", justify="right")
    for g in result.groups:
        for i, (name, st) in enumerate(g.stats.items()):
            t.add_row(
                *(key_cells(g.key) if i == 0 else [""] * len(by)),
                *([name] if result.kind.split else []),
                str(st.n),
                *(f"{v:.3f}" for v in (st.mean, st.stdev, st.min, st.p50, st.p95, st.max)),
                end_section=i == len(g.stats) - 1 and len(g.stats) > 1,
            )
    console.print(t)


def _cell(v: Any) -> str:
    return "-" if v is None else str(v)


# --- export -------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as store:
        columns, rows = query.export_states(store, args.runs)
        runs = [store.run(r).to_json() for r in dict.fromkeys(r["run_id"] for r in rows)]
    out = args.output.open("w", newline="") if args.output else None
    try:
        stream: Any = out or sys.stdout
        if args.format == "json":
            json.dump({"runs": runs, "states": rows}, stream, indent=2)
            stream.write("\n")
        else:
            w = csv.DictWriter(stream, fieldnames=columns, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    finally:
        if out:
            out.close()
    if args.output:
        _console().print(f"{len(rows)} crash states -> {args.output}")
    return 0


# --- diff and check -----------------------------------------------------------------


def cmd_diff(args: argparse.Namespace) -> int:
    baseline = rdiff.load_baseline(args.baseline) if args.baseline else None
    with _open(args) as store:
        d = rdiff.diff_runs(store, args.run_a, args.run_b)
        report = rdiff.check_run(store, d.b.id, baseline) if baseline else None
    console = _console()
    if args.json:
        out = d.to_json() | ({"check": report.to_json()} if report else {})
        console.out(json.dumps(out, indent=2))
    else:
        _print_diff(console, d)
        if report:
            _print_check(console, report)
    return EXIT_FINDING if report and report.regressions else 0


def _print_diff(console: Console, d: rdiff.RunDiff) -> None:
    console.print(
        f"[bold]{d.a.id}[/] ({d.a.scenario}, {d.a.guest_kernel or '-'}) -> "
        f"[bold]{d.b.id}[/] ({d.b.scenario}, {d.b.guest_kernel or '-'})"
    )
    for note in d.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(
        f"{d.matched} states checked in both; {len(d.changes)} changed outcome"
        f" ({len(d.worse)} worse)"
    )
    if d.changes:
        t = Table(title="outcome changes", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("state", "before", "after", "recovery s before", "recovery s after"):
            t.add_column(col, justify="right" if col.startswith("recovery") else "left")
        for c in d.changes[:SHOWN_STATES]:
            t.add_row(
                c.state_id,
                _outcome_markup(c.before) if c.before else "[dim]absent[/]",
                _outcome_markup(c.after) if c.after else "[dim]absent[/]",
                _secs(c.seconds_before),
                _secs(c.seconds_after),
            )
        console.print(t)
        if len(d.changes) > SHOWN_STATES:
            console.print(f"… and {len(d.changes) - SHOWN_STATES} more: use --json for all")
    if d.phases:
        t = Table(
            title="recovery time, states in both runs", title_justify="left", box=box.SIMPLE_HEAD
        )
        for col in ("phase", "n", "mean s before", "mean s after", "delta s", "delta %"):
            t.add_column(col, justify="left" if col == "phase" else "right")
        for p in d.phases:
            pct = f"{100 * p.delta / p.mean_before:+.0f}%" if p.mean_before else "-"
            t.add_row(
                p.phase,
                str(p.n),
                f"{p.mean_before:.3f}",
                f"{p.mean_after:.3f}",
                f"{p.delta:+.3f}",
                pct,
            )
        console.print(t)


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


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
            _print_check(console, r)
    return EXIT_FINDING if any(r.regressions for r in reports) else 0


def _print_check(console: Console, r: rdiff.CheckReport) -> None:
    head = f"run {r.run.id} ({r.run.scenario}): "
    if r.regressions:
        console.print(head + "[bold red]REGRESSED[/]")
        for line in r.regressions:
            console.print(f"  [red]-[/] {line}")
    else:
        console.print(
            head
            + "[green]within the baseline[/]"
            + (f"  ({_counts_markup(r.run.outcome_counts)})" if r.run.outcome_counts else "")
        )
    for note in r.notes:
        console.print(f"  [yellow]note:[/] {note}")


# --- plot ---------------------------------------------------------------------------


def cmd_plot(args: argparse.Namespace) -> int:
    from harness.report import plots

    out = args.output or default_db().parent / f"{args.chart}.png"
    with _open(args) as store:
        try:
            if args.chart == "crashmap":
                if not args.run:
                    raise InputError("plot crashmap needs a RUN", hint="scenario results runs")
                plots.plot_crashmap(store, args.run, out)
            elif args.chart == "recovery":
                by = query.parse_by(args.by) if args.by is not None else ["fs", "data_mode"]
                plots.plot_recovery(store, by, out)
            else:
                by = query.parse_by(args.by) if args.by is not None else ["layout", "fill"]
                plots.plot_scans(store, by, out, args.chart)
        except plots.NoData as e:
            _console().print(f"nothing to plot: {e}")
            return 0
    _console().print(f"wrote {out}")
    return 0


# --- serve --------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from harness.report import serve

    db = args.db or default_db()
    # SIGTERM (a service manager, a test) stops it like Ctrl-C: datasette is stopped and
    # the snapshot removed on the way out.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with serve.start_server(db, args.port) as srv:
            # print, flushed: a script reads the URL from a pipe
            print(f"serving a read-only snapshot of {db}", flush=True)
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
