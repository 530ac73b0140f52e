"""Rich renderings of stored runs for ``scenario results``: run details, grouped tables,
diffs and baseline checks. The CLI parses and loads; this module only draws."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from harness.check import promises
from harness.outcome import Outcome, is_finding, is_harness
from harness.report import campaign_diff, query
from harness.report import diff as rdiff
from harness.report.markup import esc
from harness.store.db import PhaseStats, RunDetail, RunRow, StateRow

# Rows of non-consistent states printed before pointing at --json for the rest.
SHOWN_STATES = 50


def reuse_line(counts: Mapping[str, int]) -> str:
    """How many crash states were generated, how many distinct checks they are (image and
    check key), how many were checked in this run and how many took an earlier verdict
    (docs/verdicts.md, "Every distinct state is checked once")."""
    return (
        f"generated {counts.get('generated', 0)}, distinct {counts.get('distinct', 0)}, "
        f"checked {counts.get('checked', 0)} (reused {counts.get('reused', 0)})"
    )


def print_detail(console: Console, d: RunDetail) -> None:
    console.print(_head(d))
    r = d.run
    params = Table(title="parameters", title_justify="left")
    params.add_column("key")
    params.add_column("value", overflow="fold")
    for key, value in sorted(flatten(r.params).items()):
        params.add_row(esc(key), esc(json.dumps(value)))
    if r.params:
        console.print(params)
    if d.recovery:
        console.print(_recovery(d.recovery))
    _print_states(console, d.states)
    if d.items:
        print_items(console, d.items)


def _head(d: RunDetail) -> Table:
    """The run's own lines: what ran where, its account and exit status."""
    r = d.run
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for key, value in (
        ("run", esc(r.id)),
        ("scenario", esc(f"{r.scenario} ({r.kind})")),
        ("fs", esc(r.fs or "-")),
        ("status", status_markup(r)),
        ("started", local_time(r.started_at)),
        ("duration", duration(r)),
        ("seed", "-" if r.seed is None else str(r.seed)),
        ("host", esc(r.host or "-")),
        ("accelerator", esc(r.accelerator or "-")),
        ("guest kernel", esc(r.guest_kernel or "-")),
        ("qemu", esc(r.qemu_version or "-")),
        ("image", esc(r.image_hash or "-")),
        ("tools", esc(", ".join(f"{k} {v}" for k, v in sorted(r.tool_versions.items())) or "-")),
        *((("states", esc(reuse_line(d.reuse))),) if d.reuse else ()),
        ("outcomes", account_markup(r) or "no states checked"),
        *((("judged by", esc(judged_by(d.states))),) if judged_by(d.states) else ()),
        ("exit status", exit_markup(r)),
    ):
        head.add_row(key, value)
    # The summary repeats the counts for a finished run; show only what it adds (an
    # error message of a failed run, say).
    extra = {
        k: v
        for k, v in (r.summary or {}).items()
        if k not in ("outcome_counts", "expected_outcomes", "reuse")
    }
    for key, value in sorted(flatten(extra).items()):
        head.add_row(esc(key), esc(value))
    return head


def _recovery(phases: Sequence[PhaseStats]) -> Table:
    rec = Table(title="recovery time (seconds)", title_justify="left")
    rec.add_column("phase")
    for col in ("n", "mean", "p50", "p95", "max"):
        rec.add_column(col, justify="right")
    for ph in phases:
        rec.add_row(
            esc(ph.phase), str(ph.n), *(f"{v:.3f}" for v in (ph.mean, ph.p50, ph.p95, ph.max))
        )
    return rec


def _print_states(console: Console, states: Sequence[StateRow]) -> None:
    """The states that were not consistent (the first SHOWN_STATES), and how many were
    not checked."""
    flagged = [s for s in states if s.outcome not in (Outcome.CONSISTENT, None)]
    unchecked = sum(1 for s in states if s.outcome is None)
    if flagged:
        st = Table(title="states that were not consistent", title_justify="left")
        # An id is copied whole into the next command: it never folds; the prose does.
        for col in ("state", "outcome", "promise broken"):  # read (and copied) whole
            st.add_column(col, no_wrap=True)
        for col in ("generator", "last mark", "description", "checks"):
            st.add_column(col, overflow="fold")
        for s in flagged[:SHOWN_STATES]:
            st.add_row(
                esc(s.id),
                outcome_markup(s.outcome or ""),
                esc(promise_cell(s)),
                esc(s.generator),
                esc(s.last_mark or "-"),
                esc(s.description),
                esc(
                    ", ".join(
                        f"{c.stage}/{c.checker}: {c.outcome}"
                        for c in s.checks
                        if c.outcome != Outcome.CONSISTENT
                    )
                ),
            )
        console.print(st)
        if len(flagged) > SHOWN_STATES:
            console.print(f"… and {len(flagged) - SHOWN_STATES} more: use --json for all")
        for name in sorted({s.promise.broken for s in flagged if s.promise and s.promise.broken}):
            # Prose: it wraps at the console's width (a command line would not).
            said = f"{name}: {promises.PROFILES.get(name, '?')}"
            console.print(said, markup=False, soft_wrap=False)
    elif states:
        console.print("every checked state was consistent")
    if unchecked:
        console.print(f"{unchecked} state(s) recorded but not checked (resume the run)")


def judged_by(states: Sequence[StateRow]) -> str:
    """The guarantee profile(s) the run's states were judged by (docs/verdicts.md)."""
    return ", ".join(sorted({s.promise.profile for s in states if s.promise and s.promise.profile}))


def promise_cell(s: StateRow) -> str:
    """A finding's promise at a glance: the POSIX floor or a stronger profile's, and the
    rule; "-" where none is stored (before schema 10, or no oracle judged it)."""
    p = s.promise
    if p is None or not (p.broken or p.rule):
        return "-"
    floor = "" if p.broken is None else (" (POSIX floor)" if p.broken == "posix" else " (> POSIX)")
    return f"{p.broken or '-'}{floor}: {p.rule or '-'}"


def print_items(console: Console, items: Sequence[Mapping[str, Any]]) -> None:
    """The items of a kind that stores observations: each one's outcome and its row (the
    kind's own summary of the item, or its scalar measurements)."""
    t = Table(title="items", title_justify="left")
    for col in ("item", "outcome", "measured"):
        t.add_column(col, overflow="fold")
    for it in items[:SHOWN_STATES]:
        m = it["metrics"]
        shown = m.get("row") or {
            k: v for k, v in flatten(m).items() if isinstance(v, str | int | float | bool)
        }
        text = ", ".join(
            f"{k} {round(v, 3) if isinstance(v, float) else v}" for k, v in shown.items()
        )
        t.add_row(esc(it["item"]), outcome_markup(it["outcome"] or "-"), esc(text[:300]))
    console.print(t)
    if len(items) > SHOWN_STATES:
        console.print(f"… and {len(items) - SHOWN_STATES} more: use --json for all")


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict) or not d:
        return {prefix: d} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def local_time(iso: str) -> str:
    return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M")


def duration(r: RunRow) -> str:
    seconds = r.duration
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def style(outcome: str) -> str:
    try:
        o = Outcome(outcome)
    except ValueError:
        return "magenta"
    if is_finding(o):
        return "bold red"
    if is_harness(o):
        return "yellow"
    return "green" if o is Outcome.CONSISTENT else "dim"


def outcome_markup(outcome: str) -> str:
    return f"[{style(outcome)}]{esc(outcome)}[/]"


def counts_markup(counts: Mapping[str, int], sep: str = "  ") -> str:
    return sep.join(f"[{style(o)}]{esc(o)} {n}[/]" for o, n in counts.items())


def account_markup(r: RunRow, sep: str = "  ") -> str:
    """A run's outcomes as its account has them: the ones that can be findings, then the
    ones its kind's rule expects (dim: reported, never findings), naming the options that
    waived a promise (harness/waivers.py)."""
    waived = ", ".join(sorted(set(r.account.waived.values())))
    why = f"expected: {waived} waived the promise" if waived else "expected"
    expected = sep.join(f"[dim]{o} {n} ({esc(why)})[/]" for o, n in r.account.expected.items())
    return sep.join(s for s in (counts_markup(r.outcome_counts, sep), expected) if s)


def exit_markup(r: RunRow) -> str:
    if r.exit_status is None:
        return "-"
    words = {0: "no finding", 1: "finding", 2: "bad input", 3: "harness failure"}
    return f"{r.exit_status} ({words.get(r.exit_status, '?')})"


def status_markup(r: RunRow) -> str:
    colour = {"done": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}
    return f"[{colour.get(str(r.status), 'white')}]{esc(r.status)}[/]"


def print_grouped(console: Console, result: query.GroupedTable) -> None:
    by = [esc(f) for f in result.by or ("all",)]

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
            t.add_column(outcome_markup(o), justify="right")
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
        t.add_column(esc(result.kind.split))
    for col in ("n", "mean", "stdev", "min", "p50", "p95", "max"):
        t.add_column(col if col == "n" else f"{col} {unit}", justify="right")
    for g in result.groups:
        for i, (name, st) in enumerate(g.stats.items()):
            t.add_row(
                *(key_cells(g.key) if i == 0 else [""] * len(by)),
                *([esc(name)] if result.kind.split else []),
                str(st.n),
                *(f"{v:.3f}" for v in (st.mean, st.stdev, st.min, st.p50, st.p95, st.max)),
                end_section=i == len(g.stats) - 1 and len(g.stats) > 1,
            )
    console.print(t)


def _cell(v: Any) -> str:
    return "-" if v is None else esc(v)


def print_diff(console: Console, d: rdiff.RunDiff) -> None:
    console.print(
        f"[bold]{esc(d.a.id)}[/] ({esc(d.a.scenario)}, {esc(d.a.guest_kernel or '-')}) -> "
        f"[bold]{esc(d.b.id)}[/] ({esc(d.b.scenario)}, {esc(d.b.guest_kernel or '-')})"
    )
    for note in d.notes:
        console.print(f"[yellow]note:[/] {esc(note)}")
    if d.outcomes:
        console.print(
            "outcomes: "
            + ", ".join(
                f"{esc(o)} {a}" + (f" -> [bold]{b}[/]" if a != b else "")
                for o, (a, b) in d.outcomes.items()
            )
        )
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
                esc(c.state_id),
                outcome_markup(c.before) if c.before else "[dim]absent[/]",
                outcome_markup(c.after) if c.after else "[dim]absent[/]",
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
        for col in ("phase", "n", "mean s before", "mean s after", "delta s", "ratio"):
            t.add_column(col, justify="left" if col == "phase" else "right")
        for p in d.phases:
            t.add_row(
                esc(p.phase),
                str(p.n),
                f"{p.mean_before:.3f}",
                f"{p.mean_after:.3f}",
                f"{p.delta:+.3f}",
                "-" if p.ratio is None else f"{p.ratio:.2f}x",
            )
        console.print(t)


def outcome_changes(d: rdiff.RunDiff) -> str:
    """The outcome counts that changed, ``data_loss 0 -> 2``; "same" when none did."""
    changed = [f"{o} {a} -> {b}" for o, (a, b) in d.outcomes.items() if a != b]
    return ", ".join(changed) or "same"


def print_campaign_diff(console: Console, d: campaign_diff.CampaignDiff) -> None:
    """A line per paired cell, then each pair as ``print_diff`` shows two runs, then what
    only one campaign has."""
    console.print(
        f"campaign [bold]{esc(d.a)}[/] ({esc(d.name_a)}) -> [bold]{esc(d.b)}[/] "
        f"({esc(d.name_b)}): {len(d.pairs)} paired runs"
    )
    t = Table(box=box.SIMPLE_HEAD)
    for col in ("cell", "kernel", "runs", "outcome counts", "states changed"):
        t.add_column(col)
    for p in d.pairs:
        r = p.diff
        kernels = r.a.guest_kernel or "-"
        if r.b.guest_kernel != r.a.guest_kernel:
            kernels += f" -> {r.b.guest_kernel or '-'}"
        t.add_row(
            esc(p.cell),
            esc(kernels),
            esc(f"{r.a.id} -> {r.b.id}"),
            esc(outcome_changes(r)),
            f"{len(r.changes)} ({len(r.worse)} worse)",
        )
    console.print(t)
    for p in d.pairs:
        console.print(f"\n[bold]{esc(p.cell)}[/]")
        print_diff(console, p.diff)
    for name, only in ((d.name_a or d.a, d.only_a), (d.name_b or d.b, d.only_b)):
        for u in only:
            run = f"run {u.run_id}" if u.run_id else "no run"
            console.print(
                f"[yellow]only in {esc(name)}:[/] {esc(u.element)} ({esc(u.status)}, {esc(run)})"
            )


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_check(console: Console, r: rdiff.CheckReport) -> None:
    head = esc(f"run {r.run.id} ({r.run.scenario}): ")
    if r.regressions:
        console.print(head + "[bold red]REGRESSED[/]")
        for line in r.regressions:
            console.print(f"  [red]-[/] {esc(line)}")
    else:
        console.print(
            head
            + "[green]within the baseline[/]"
            + (f"  ({counts_markup(r.run.outcome_counts)})" if r.run.outcome_counts else "")
        )
    for note in r.notes:
        console.print(f"  [yellow]note:[/] {esc(note)}")
