"""``scenario campaign run|status FILE``: run a campaign with one progress view, resume
it after a kill, and end with a summary of every element."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from harness import outcome, paths
from harness.campaign import on_dask as campaign_dask
from harness.campaign import runner as campaign
from harness.check import distributed
from harness.cli import backend, ui
from harness.cli import census as cli_census
from harness.cli import digest as cli_digest
from harness.config import campaign as config_campaign
from harness.config import scenario
from harness.config.campaign import Campaign, Element
from harness.config.crash import parse_dask_target
from harness.errors import InputError
from harness.outcome import EXIT_FINDING, EXIT_HARNESS, EXIT_OK
from harness.report import junit, knownbugs, mutants, runlog
from harness.report.markup import cells, esc
from harness.store.db import Store

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser("campaign", help="run many scenarios x parameters x seeds; resumable")
    csub = p.add_subparsers(dest="campaign_command", metavar="ACTION", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "file", type=Path, metavar="FILE", help="campaign TOML, e.g. campaigns/ci.toml"
    )
    common.add_argument(
        "--db", type=Path, default=None, help="results database (default results/lab.sqlite)"
    )
    run = csub.add_parser(
        "run",
        parents=[common],
        help="run or resume a campaign",
        description="Run every element (scenario x --set matrix x seed). Run it again after"
        " a kill or a reboot: finished elements are skipped, the interrupted one resumes."
        " Exit 0: no finding; 1: a finding; 3: an element was quarantined or could not check.",
    )
    run.add_argument(
        "--new", action="store_true", help="start a fresh campaign even if one is unfinished"
    )
    run.add_argument("--dry-run", action="store_true", help="list the elements, run nothing")
    run.add_argument(
        "--junit",
        metavar="PATH",
        default=None,
        help="after the campaign, write its JUnit XML to PATH (- for stdout; the summary then"
        " goes to stderr): a testcase per element, a failure per finding, an error per"
        " element the lab could not finish, skipped ones with their reasons",
    )
    run.add_argument(
        "--dask",
        metavar="TARGET",
        default=None,
        help="run the elements as Dask tasks: local:N starts N local workers,"
        " tcp://HOST:PORT uses a running `dask scheduler` (workers on each lab host)",
    )
    backend.add_options(run)
    run.set_defaults(func=cmd_run)
    status = csub.add_parser("status", parents=[common], help="the latest campaign's elements")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    mut = csub.add_parser(
        "mutants",
        parents=[common],
        help="the detection table of a mutant campaign: which mutant each scenario caught",
        description="Exit 0: every mutant caught and every stock control clean; 1: a gap "
        "(a mutant nothing caught) or a stock control that found something.",
    )
    mut.add_argument("--json", action="store_true")
    mut.set_defaults(func=cmd_mutants)
    kb = csub.add_parser(
        "known-bugs",
        parents=[common],
        help="the known-bugs table: each real bug x the kernel that has it, the fixed one, "
        "the image's",
        description="Exit 0: every bug caught where present and clean where fixed; 1: one "
        "missed or found where it should be clean; bugs that do not reproduce are listed "
        "with their reasons.",
    )
    kb.add_argument("--json", action="store_true")
    kb.set_defaults(func=cmd_known_bugs)
    cli_census.register(csub)
    cli_digest.register(csub)


def cmd_run(args: argparse.Namespace) -> int:
    camp = config_campaign.load(args.file, backend.overrides(args))
    db = args.db or paths.default_db()
    if args.dry_run:
        _print_plan(camp)
        return EXIT_OK
    # Checked first: a campaign of hours must not end on a path that cannot be written.
    junit_to = junit.destination(args.junit) if args.junit is not None else None
    view = RichView()
    if args.dask:
        parse_dask_target(args.dask)
        with distributed.client(args.dask) as client, view:
            dask_engine = campaign_dask.DaskEngine(
                camp, db, client, view=view, after_element=_write_log
            )
            report = dask_engine.run(new=args.new)
    else:
        engine = campaign.Engine(camp, db, runner=_run_element, view=view, after_element=_write_log)
        with view:
            report = engine.run(new=args.new)
    if args.junit is None:
        return summarize(report)
    # With --junit -, stdout is the XML's alone.
    status = summarize(report, console if junit_to else ui.console(stderr=True))
    with Store.open(report.db, create=False) as st:
        suite = junit.campaign_suite(st, report.campaign_id, report.campaign.skipped)
    junit.write(junit.to_xml([suite]), junit_to)
    if junit_to:
        console.print(junit.summary_line([suite], junit_to), markup=False)
    return status


def _run_element(el: Element, ctx: campaign.ElementContext) -> str:
    """The engine's own runner, on the backend the element's scenario names."""
    backend.select_for(scenario.load(el.scenario, el.overrides))
    return campaign.run_scenario_element(el, ctx)


def _write_log(st: Store, row: campaign.ElementRow) -> None:
    if row.run_id:
        runlog.write_run_log(st.path, row.run_id)


def _print_plan(camp: config_campaign.Campaign) -> None:
    t = Table(
        title=esc(f"campaign {camp.name}: {len(camp.elements)} elements"), box=box.SIMPLE_HEAD
    )
    t.add_column("#", justify="right")
    t.add_column("scenario")
    t.add_column("--set")
    t.add_column("seed", justify="right")
    for e in camp.elements:
        t.add_row(*cells(e.position, e.scenario, " ".join(e.overrides) or "-", e.seed))
    console.print(t)
    for name in camp.skipped:
        console.print(f"[yellow]skipped[/] optional scenario {esc(name)}: it does not exist yet")


@dataclass
class _Latest:
    """The newest run of a campaign file against a store, read while the store is open."""

    camp: Campaign
    cid: str
    status: str
    started: str
    rows: list[campaign.ElementRow]


def _latest(args: argparse.Namespace, read: Callable[[Store, _Latest], Any]) -> Any:
    """``read(store, latest)`` on the campaign's newest run; None if it never ran."""
    camp = config_campaign.load(args.file)
    db = args.db or paths.default_db()
    with Store.open(db, create=False) as st:
        found = st.latest_campaign(camp.name, camp.spec_hash)
        if found is None:
            console.print(f"campaign {camp.name} has not run against {db}", markup=False)
            return None
        cid, status, started = found
        return read(
            st, _Latest(camp, cid, status, started, campaign.Engine(camp, db).rows(st, cid))
        )


def cmd_status(args: argparse.Namespace) -> int:
    got = _latest(args, lambda st, lt: (lt, _accounts(st, lt.rows)))
    if got is None:
        return EXIT_OK
    lt, accounts = got
    if args.json:
        rows = [_element_json(r, accounts.get(r.run_id or "")) for r in lt.rows]
        head = {"campaign": lt.camp.name, "id": lt.cid, "status": lt.status}
        print(json.dumps({**head, "started": lt.started, "elements": rows}, indent=2))
        return EXIT_OK
    when = f"{lt.cid}: {lt.status}, started {lt.started}"
    console.print(f"campaign [bold]{esc(lt.camp.name)}[/] {esc(when)}")
    console.print(_elements_table(lt.rows, accounts))
    return EXIT_OK


def _mutant_reads(st: Store, lt: _Latest) -> list[mutants.Cell]:
    return mutants.runs_of(lt.rows, _run_reads(st, lt))


def cmd_mutants(args: argparse.Namespace) -> int:
    cells = _latest(args, _mutant_reads)
    if cells is None:
        return EXIT_OK
    d = mutants.detection(cells)
    if args.json:
        print(json.dumps(d.to_json(), indent=2))
    else:
        t = Table("mutant", "scenario", "result", "findings", "states", "run")
        for c in d.cells:
            style = {"caught": "green", "clean": "green", "missed": "red", "FOUND": "red"}
            mark = f"[{style.get(c.result, 'yellow')}]{esc(c.result)}[/]"
            t.add_row(
                esc(c.mutant or "(stock)"),
                esc(c.scenario),
                mark,
                str(c.findings),
                esc(" ".join(c.states) or "-"),
                esc(c.run_id or "-"),
            )
        console.print(t)
        console.print(mutants.summary_line(d), markup=False)
    return outcome.status(finding=bool(d.gaps or d.false_alarms))


def _run_reads(st: Store, lt: _Latest) -> dict[str, tuple[outcome.Account, Any]]:
    return {
        r.run_id: (st.account(r.run_id)[0], st.item_outcomes(r.run_id)) for r in lt.rows if r.run_id
    }


def cmd_known_bugs(args: argparse.Namespace) -> int:
    camp = config_campaign.load(args.file)
    if not camp.bugs:
        raise InputError(f"{args.file}: no [[bug]] tables", hint="e.g. campaigns/known-bugs.toml")
    got = _latest(args, lambda st, lt: knownbugs.table(camp.bugs, lt.rows, _run_reads(st, lt)))
    rows = got if got is not None else knownbugs.table(camp.bugs, [], {})
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        console.print(_known_bugs_table(rows))
        console.print(knownbugs.summary_line(rows), markup=False)
    return outcome.status(finding=not all(r.as_expected for r in rows))


_RESULT_STYLE = {"caught": "green", "clean": "green", "MISSED": "red", "FOUND": "red"}


def _known_bugs_table(rows: Sequence[knownbugs.BugRow]) -> Table:
    t = Table("bug", "fs", "fix", *knownbugs.ROLES, box=box.SIMPLE_HEAD)
    for r in rows:
        b = r.bug
        cols = []
        for role in knownbugs.ROLES:
            v = r.verdicts.get(role)
            if v is None:
                cols.append("-")
                continue
            what = f"[{_RESULT_STYLE.get(v.result, 'yellow')}]{esc(v.result)}[/]"
            more = f" {v.findings}/{v.states} states" if v.run_id else ""
            more += f" {v.seconds:.0f} s" if v.seconds else ""
            cols.append(f"{esc(v.kernel)}: {what}{esc(more)}")
        fix = f"{b.commit[:12] or '(no hash)'} {b.title}" + (f" ({b.fstests})" if b.fstests else "")
        if not b.reproduces:
            fix += f"\nnot reproduced: {b.reason}"
        t.add_row(esc(b.name), esc(b.fs), esc(fix), *cols)
    return t


def _accounts(
    st: Store, rows: Sequence[campaign.ElementRow]
) -> dict[str, tuple[outcome.Account, int]]:
    """Each element run's account and exit status, as the lifecycle stored them, for
    every experiment kind alike (a run stored before accounts existed: derived from its
    items)."""
    out: dict[str, tuple[outcome.Account, int]] = {}
    for r in rows:
        if r.run_id:
            account, status = st.account(r.run_id)
            out[r.run_id] = (account, account.status if status is None else status)
    return out


def _element_json(
    r: campaign.ElementRow, account: tuple[outcome.Account, int] | None
) -> dict[str, Any]:
    e = r.element
    return {
        "position": e.position,
        "scenario": e.scenario,
        "set": list(e.overrides),
        "seed": e.seed,
        "status": str(r.status),
        "run": r.run_id,
        "outcomes": dict(account[0].counts) if account else {},
        "expected": dict(account[0].expected) if account else {},
        "seconds": r.seconds,
        "error": r.last_error,
    }


def _outcomes_cell(account: outcome.Account) -> str:
    shown = [f"{o} {n}" for o, n in account.counts.items()]
    shown += [f"{o} {n} (expected)" for o, n in account.expected.items()]
    return "  ".join(shown) or "-"


_STYLE = {
    "done": "green",
    "running": "cyan",
    "pending": "dim",
    "failed": "yellow",
    "quarantined": "bold red",
}


def _elements_table(
    rows: Sequence[campaign.ElementRow], accounts: dict[str, tuple[outcome.Account, int]]
) -> Table:
    t = Table(box=box.SIMPLE_HEAD)
    for col in ("#", "scenario", "--set", "seed", "status", "run", "outcomes", "seconds"):
        t.add_column(col, justify="right" if col in ("#", "seed", "seconds") else "left")
    for r in rows:
        e = r.element
        account = accounts.get(r.run_id or "", (outcome.Account(), EXIT_OK))[0]
        status = f"[{_STYLE.get(r.status, 'white')}]{esc(r.status)}[/]"
        if r.status in ("failed", "quarantined") and r.last_error:
            status += f"\n[dim]{esc(r.last_error[:120])}[/]"
        t.add_row(
            *cells(e.position, e.scenario, " ".join(e.overrides) or "-", e.seed),
            status,
            *cells(
                r.run_id or "-",
                _outcomes_cell(account),
                "-" if r.seconds is None else f"{r.seconds:.0f}",
            ),
        )
    return t


def summarize(report: campaign.CampaignReport, console: Console = console) -> int:
    with Store.open(report.db, create=False) as st:
        accounts = _accounts(st, report.rows)
    done = report.by_status(campaign.ElementStatus.DONE)
    quarantined = report.by_status(campaign.ElementStatus.QUARANTINED)
    console.print(
        f"[bold]campaign {esc(report.campaign.name)}[/] {report.campaign_id}"
        + (" (resumed)" if report.resumed else "")
        + f": {len(done)}/{len(report.rows)} done, {len(quarantined)} quarantined;"
        f" {report.ran} run(s) this time; store {esc(report.db)}"
    )
    console.print(_elements_table(report.rows, accounts))
    for name in report.campaign.skipped:
        console.print(f"[yellow]skipped[/] optional scenario {esc(name)}: it does not exist yet")
    for r in quarantined:
        console.print(
            f"[bold red]quarantined[/] {esc(r.element.label)}: {r.failures} failure(s),"
            f" {r.interruptions} interruption(s); last: {esc(r.last_error)}"
        )
    status = outcome.campaign_status(
        [s for _, s in accounts.values()], quarantined=bool(quarantined)
    )
    controls = {rid: a for rid, (a, _) in accounts.items() if a.expect}
    failed = {rid: a.control_failed for rid, a in controls.items() if a.control_failed}
    for rid, why in failed.items():
        console.print(f"[bold red]{esc(why)}[/] (run {esc(rid)})")
    if controls and not failed:
        console.print(f"[green]{len(controls)} known-answer control(s) gave their answer[/]")
    console.print(
        {
            EXIT_OK: "[green]no finding[/] in any run",
            EXIT_FINDING: "[red]finding[/]: see `scenario results show RUN` for the runs above",
            EXIT_HARNESS: "[yellow]harness trouble[/]: some element or state could not be"
            " checked; this says nothing about the filesystems",
        }[status]
    )
    console.print(f"per-run logs: {runlog.log_path('RUN').parent}/RUN.log", markup=False)
    return status


def _fmt(seconds: float) -> str:
    s = round(max(0.0, seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


class RichView:
    """One live view on stderr: the campaign line with its ETA, the element running now."""

    def __init__(self) -> None:
        self.out = ui.console(stderr=True)
        self.live = Live(console=self.out, refresh_per_second=2, transient=True)
        self.name = ""
        self.total = 0
        self.n_finished = 0
        self.quarantined = 0
        self.eta = 0.0
        self.eta_at = time.monotonic()
        # label -> (started, expected seconds, stall budget): one on a single host, as
        # many as the cluster has workers with --dask.
        self.running: dict[str, tuple[float, float, float | None]] = {}
        self.what = ""

    def __enter__(self) -> RichView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def _render(self) -> Group:
        # The ETA counts down between elements, from what the remaining ones took before.
        left = max(0.0, self.eta - (time.monotonic() - self.eta_at))
        head = Text.from_markup(
            f"[bold]campaign {esc(self.name)}[/]  {self.n_finished}/{self.total} finished"
            + (f", [red]{self.quarantined} quarantined[/]" if self.quarantined else "")
            + f"  ETA {_fmt(left)} (learnt from earlier runs)"
        )
        lines = []
        for label, (started, expected, budget) in self.running.items():
            limit = f", stall budget {_fmt(budget)}" if budget else ""
            elapsed = _fmt(time.monotonic() - started)
            lines.append(f"  now: [cyan]{esc(label)}[/]  {elapsed} of ~{_fmt(expected)}{limit}")
        if len(self.running) == 1 and self.what:
            lines.append(f"  {esc(self.what)}")
        return Group(head, Text.from_markup("\n".join(lines)))

    def _refresh(self) -> None:
        self.live.update(self._render())

    def start(
        self, camp: config_campaign.Campaign, rows: Sequence[campaign.ElementRow], eta: float
    ) -> None:
        self.name, self.total = camp.name, len(rows)
        self.n_finished = sum(1 for r in rows if r.status in ("done", "quarantined"))
        self.quarantined = sum(1 for r in rows if r.status == "quarantined")
        self.eta, self.eta_at = eta, time.monotonic()
        self._refresh()

    def element(self, row: campaign.ElementRow, expected: float, budget: float | None) -> None:
        self.running[row.element.label] = (time.monotonic(), expected, budget)
        self.what = "starting"
        self._refresh()

    def progress(self, what: str, done: int, total: int) -> None:
        self.what = f"{what} {done}/{total}" if total else what
        self._refresh()

    def finished(self, row: campaign.ElementRow, eta: float) -> None:
        if row.status in ("done", "quarantined"):
            self.n_finished += 1
        if row.status == "quarantined":
            self.quarantined += 1
        self.eta, self.eta_at = eta, time.monotonic()
        self.running.pop(row.element.label, None)
        mark = {"done": "[green]done[/]", "quarantined": "[bold red]quarantined[/]"}.get(
            row.status, f"[yellow]{esc(row.status)}[/] (will retry): {esc(row.last_error)}"
        )
        self.out.print(
            f"{esc(row.element.label)}: {mark}" + (f"  run {row.run_id}" if row.run_id else "")
        )
        self._refresh()
