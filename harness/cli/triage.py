"""``scenario explain STATE-ID``: what each write of a crash state is on the filesystem;
``scenario triage STATE-ID``: the smallest crash state that fails the same way, its writes
explained, and a report folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import paths
from harness.cli import ui
from harness.errors import InputError
from harness.triage import explain

if TYPE_CHECKING:
    from harness.triage.finding import Triaged
    from harness.triage.minimal import Result
    from harness.triage.target import Target

console = ui.console()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="name each block a crash state's writes touch: journal transaction, inode "
        "table, file and offset, XFS log record, btrfs tree block ... (ext2/3/4, XFS, btrfs; "
        "host userspace tools on the image)",
    )
    p.add_argument("state_id", metavar="STATE-ID")
    p.add_argument(
        "--entries",
        metavar="FIRST..LAST",
        help="these log entries (default: the writes the state drops or tears, else those "
        "after its last mark)",
    )
    p.add_argument("--db", type=Path, default=None)
    p.set_defaults(func=cmd_explain)

    t = sub.add_parser(
        "triage",
        help="minimise a finding: the fewest differing writes that fail the same way "
        "(ddmin), explained, and a report folder under the run's directory",
    )
    t.add_argument("state_id", metavar="STATE-ID")
    t.add_argument(
        "--no-workload",
        action="store_true",
        help="minimise the crash state only (fast): no workload is re-recorded",
    )
    t.add_argument(
        "--max-candidates",
        type=int,
        default=None,
        metavar="N",
        help="stop each ddmin (the state's, the workload's) after N candidates (default 200); "
        "the report says when it stopped it",
    )
    t.add_argument(
        "--fstests",
        type=Path,
        default=None,
        metavar="XFSTESTS_DIR",
        help="of a triaged finding: its minimal workload as an fstests test in this checkout "
        "(tests/generic/NNN-crashlab-STATE and .out), proven with ./check in lab guests on the "
        "finding's kernel (must fail) and --fstests-good-kernel (must pass)",
    )
    t.add_argument(
        "--fstests-good-kernel",
        default=None,
        metavar="RELEASE",
        help="the kernel without the bug the test must pass on (default: the image's)",
    )
    t.add_argument(
        "--no-proof",
        action="store_true",
        help="with --fstests: write the test, boot no guest (the README says it is unproven)",
    )
    t.add_argument(
        "--report",
        action="store_true",
        help="of a triaged finding: report.eml in its report folder, a plain-text bug report "
        "for the filesystem's list (nothing is sent)",
    )
    t.add_argument("--db", type=Path, default=None)
    t.set_defaults(func=cmd_triage)


def cmd_explain(args: argparse.Namespace) -> int:
    span = explain.parse_entries(args.entries) if args.entries else None
    x = explain.explain_state(args.state_id, args.db or paths.default_db(), span)
    console.print(f"crash state {x.state.describe()} of run {x.run_id}", markup=False)
    console.print(f"{x.which}:", markup=False)
    for line in x.explanation.lines() or ["(no writes)"]:
        console.print(line, markup=False, soft_wrap=True)
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    if args.fstests is not None or args.report:
        return _deliver(args)
    return _triage(args)


def _triage(args: argparse.Namespace) -> int:
    """Minimise the state (and the workload), write the report folder, say what it found."""
    from harness.record import logwrites
    from harness.triage import minimal, report

    most = minimal.DEFAULT_MAX_CANDIDATES if args.max_candidates is None else args.max_candidates
    if most < 1:
        raise InputError(f"--max-candidates {most}: give at least 1")
    r = minimal.triage(
        args.state_id,
        args.db or paths.default_db(),
        max_candidates=most,
        workload=not args.no_workload,
        progress=lambda text: console.print(f"[dim]{text}[/dim]", markup=True),
    )
    with logwrites.open_log(r.target.log_path) as lg:
        out = report.write(r, lg)
    s, d = r.search, r.delta
    say = [
        f"crash state {r.target.state.id} of run {r.target.run.id}: {r.original.text()}",
        f"base: {d.base_text}: {r.base.text()}",
        f"differing writes: {len(d.items)} -> {len(s.items)} ({d.kind}; {d.describe(s.items)})",
        f"minimal state: {r.state.describe()}",
        f"minimal symptom: {r.found.text()}",
        f"wall time {r.seconds:.0f} s; candidates {r.candidates} ({r.tally.host} host, "
        f"{r.tally.guest} guest in {r.tally.guest_boots} boots, {r.tally.same_image} of a "
        "known image)"
        + (f"; stopped by --max-candidates {most}" if s.capped else "")
        + (f"; {r.tally.harness} the lab could not judge" if r.tally.harness else ""),
        "the minimal state's differing writes:",
        *(r.explanation.lines() or ["(none: the base already fails the same way)"]),
        *(line.replace("`", "") for line in report.late_lines(r)),
        *_workload_lines(r),
        f"report: {out / 'README.md'}",
    ]
    for line in say:
        console.print(line, markup=False, soft_wrap=True)
    return 0


def _deliver(args: argparse.Namespace) -> int:
    """--fstests and --report: from a triaged finding's report folder."""
    from harness.fstests import check
    from harness.model import shell
    from harness.triage import finding, fstest, target

    if args.fstests is not None:
        check.require_checkout(args.fstests)  # before the store: the cheapest mistake
    db = args.db or paths.default_db()
    if args.report and args.fstests is None and (why := _waived(target.load(args.state_id, db))):
        console.print(why, markup=False, soft_wrap=True)  # no triage needed to say so
        return 0
    if not triaged(target.load(args.state_id, db)):
        # Asked for the report of a finding not triaged yet: triage it first, as the
        # plain command would, then deliver from the folder that wrote.
        console.print("not triaged yet: triaging first", markup=False)
        _triage(args)
    tr = finding.load(args.state_id, db)
    if args.fstests is not None:
        try:
            w = fstest.write(tr, args.fstests.resolve())
        except shell.NoSpelling as e:
            raise InputError(f"crash state {tr.target.state.id}: {e}") from None
        console.print(
            f"fstests test: {w.path} ({w.test.shape}), copy in {tr.folder}/fstests", markup=False
        )
        if not args.no_proof:
            facts = fstest.prove(tr, w, args.fstests.resolve(), args.fstests_good_kernel)
            for role, p in facts["proof"].items():
                console.print(
                    f"{role} kernel {p['kernel'] or 'image'}: {p['verdict']} "
                    f"(wanted {p['wanted']}), {p['seconds']:.0f} s",
                    markup=False,
                )
    if args.report:
        console.print(_mail(tr), markup=False, soft_wrap=True)
    console.print(f"report folder: {tr.folder / 'README.md'}", markup=False)
    return 0


def triaged(t: Target) -> bool:
    """Whether the finding's report folder holds its triage."""
    from harness.triage import report

    return (report.folder(t.run.id, t.state.id) / "triage.json").exists()


def _mail(tr: Triaged) -> str:
    """The maintainer's mail, written only for a promise the configuration keeps."""
    from harness.triage import mail

    return _waived(tr.target) or f"report: {mail.write(tr)}"


def _waived(t: Target) -> str:
    """Why no mail goes to a maintainer: a loss under barrier=0 is what barrier=0 says
    may happen, no report on the kernel ("" when the configuration keeps its promises)."""
    from harness import waivers

    waived = waivers.configured(str(t.fs.type), t.fs.all_mount_options())
    if not waived:
        return ""
    return (
        f"no report written: {waived[0].why()}. The finding is counted expected; run "
        "the steps without the option to ask the kernel for the promise."
    )


def _workload_lines(r: Result) -> list[str]:
    w = r.workload
    if w is None:
        return []
    if w.plan is None or w.search is None:
        return [f"workload not minimised: {w.not_minimised}"]
    p, s = w.plan, w.search
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(w.tally.items()))
    return [
        f"minimal workload: {len(p.ops)} ops ({len(p.keep(p.items))} up to the oracle point) "
        f"-> {len(w.keep)}: ops {', '.join(map(str, w.keep))}",
        f"workload ddmin: {w.seconds:.0f} s; {w.candidates} candidates ({kinds}) in "
        f"{1 + s.rounds} rounds, {w.rounds} recording guests"
        + ("; stopped by the budget" if s.capped else ""),
    ]
