"""``scenario results``: look at stored runs, as rich tables or as JSON. Here the parser
(every action and its options); what an action does is ``results_commands.py``'s.

The JSON carries at least what the tables show a person (and more: every state, every
check), so a script never has to scrape a table.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.cli.results_commands import (
    cmd_bugs,
    cmd_check,
    cmd_diff,
    cmd_export,
    cmd_plot,
    cmd_runs,
    cmd_serve,
    cmd_show,
    cmd_table,
)


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
