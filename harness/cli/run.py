"""``scenario run`` and ``scenario reproduce``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness import filesystems, paths
from harness.check import distributed
from harness.cli import backend, ui
from harness.config import scenario
from harness.crashstate import recording, statelog, stored
from harness.experiments import lifecycle, summary
from harness.report import runlog

console = ui.console()


def register(sub: Any, add_set_option: Any) -> None:
    p = sub.add_parser("run", help="run a scenario: record, replay crash states, check, store")
    p.add_argument("name", metavar="NAME", help="scenario name (see `scenario list`) or TOML path")
    add_set_option(p)
    p.add_argument("--seed", type=int, help="the scenario's seed: the same as --set seed=N")
    p.add_argument(
        "--workload-file",
        type=lambda s: Path(s).expanduser().resolve(),
        metavar="FILE",
        help="run these ops (one a line: harness/model/opfile.py) instead of the scenario's"
        " workload; the same as --set workload.type=file --set workload.path=FILE",
    )
    p.add_argument(
        "--db", type=Path, default=None, help="SQLite store (default results/lab.sqlite)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run even if an unfinished one of this scenario could be resumed",
    )
    backend.add_options(p)
    p.add_argument(
        "--dask",
        metavar="CLUSTER",
        help="host checks (check.guest=false) on Dask: local:N, or tcp://HOST:PORT of a"
        " running `dask scheduler`",
    )
    p.set_defaults(func=cmd_run)

    rec = sub.add_parser("record", help="only record a scenario's workload: the dm-log-writes log")
    rec.add_argument("name", metavar="NAME")
    add_set_option(rec)
    rec.add_argument("--seed", type=int, help="the same as --set seed=N")
    rec.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="DIR",
        help="directory for log.raw, oracle.json and recording.json",
    )
    rec.set_defaults(func=cmd_record)

    r = sub.add_parser(
        "reproduce", help="rebuild one crash state's image and say how to inspect it"
    )
    r.add_argument("state_id", metavar="STATE-ID")
    r.add_argument("--db", type=Path, default=None)
    r.add_argument(
        "-o", "--output", type=Path, default=None, help="image path (default STATE-ID.img)"
    )
    r.set_defaults(func=cmd_reproduce)


def cmd_run(args: argparse.Namespace) -> int:
    sets = [
        *(args.set or []),
        *([f"check.dask={args.dask}"] if args.dask else []),
        *backend.overrides(args),
        *workload_file(args.workload_file),
    ]
    sc = scenario.load(args.name, scenario.seeded(sets, args.seed))
    return run_and_report(sc, args.db, fresh=args.fresh)


def workload_file(path: Path | None) -> list[str]:
    """``--workload-file``'s overrides."""
    return ["workload.type=file", f"workload.path={path}"] if path else []


def run_and_report(sc: Any, db: Path | None, *, fresh: bool) -> int:
    """Run scenario ``sc`` on the lifecycle with a progress line, print its summary and
    the run log's path; the run's exit status."""
    backend.select_for(sc)
    # A Dask address that does not answer is bad input: said now, not after the recording.
    distributed.require_scheduler(getattr(getattr(sc, "check", None), "dask", ""))
    db = db or paths.default_db()
    db.parent.mkdir(parents=True, exist_ok=True)
    with ui.progress(sc.name) as progress:
        report = lifecycle.execute(sc, db=db, fresh=fresh, progress=progress)
    console = ui.console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a log file: do not fold the numbers
    summary.print_summary(console, report)
    console.print(f"log: {runlog.write_run_log(report.db, report.run_id)}", markup=False)
    return report.status


def cmd_reproduce(args: argparse.Namespace) -> int:
    db = args.db or paths.default_db()
    out = args.output or Path(f"{statelog.file_name(args.state_id)}.img")
    path, info = stored.reproduce(args.state_id, db=db, out=out)
    console.print(
        f"crash state {info['state']['id']} of run {info['run_id']}: {info['description']}",
        markup=False,
    )
    console.print(f"image: {path}", markup=False)
    if second := info.get("second_image"):
        # Its journal, log or mirror: the mount and the checker take both (docs/verdicts.md 24).
        console.print(f"second device's image: {second}", markup=False)
    for line in inspect_lines(path, info.get("fs")):
        console.print(line, markup=False, soft_wrap=True)
    return 0


def inspect_lines(path: Path, fs: str | None) -> list[str]:
    """How to look at a reproduced image: mounted in a guest (after the log replay a
    filesystem whose kernel refuses a dirty volume needs, as its boot would run it), and
    checked read-only on the host by the checker of the run's filesystem."""
    dev = "/dev/disk/by-id/virtio-disk0"
    f = filesystems.FILESYSTEMS.get(fs or "")
    replay = f"{' '.join(f.before_mount)} {dev} ; " if f and f.before_mount else ""
    check = (
        f"  {' '.join(f.on_file(f.check))} {path}   # its checker, read-only, on the host"
        if f
        else f"  e2fsck -fn {path}   # or xfs_repair -n / btrfs check --readonly (userspace, host)"
    )
    return [
        "inspect it in a disposable guest, never on the host kernel:",
        f"  scenario vm run --disk {path} -- sh -c '{replay}mount {dev} /mnt && ls -lR /mnt'",
        check,
    ]


def cmd_record(args: argparse.Namespace) -> int:
    """Record only: for fixtures, benchmarks and looking at a log by hand."""
    import json

    from harness.record import logwrites
    from harness.record import recorder as record

    sc = scenario.load(args.name, scenario.seeded(args.set or (), args.seed))
    if not isinstance(sc, scenario.Scenario):
        from harness.errors import InputError

        raise InputError(f"{sc.name}: only crash scenarios record a dm-log-writes log")
    rec = record.record(
        args.output,
        sc.fs,
        recording.workload_spec(sc),
        sc.seed,
        timeout=sc.check.timeout,
        recorder=str(sc.recorder.type),
    )
    (args.output / "oracle.json").write_text(json.dumps(rec.oracle))
    (args.output / "recording.json").write_text(
        json.dumps(
            {
                "scenario": sc.name,
                "seed": sc.seed,
                "device_size": rec.device_size,
                "seconds": rec.seconds,
                "guest_kernel": rec.guest_kernel,
                "accelerator": rec.accelerator,
            },
            indent=1,
        )
    )
    (args.output / "dut.raw").unlink(missing_ok=True)
    with logwrites.open_log(rec.log_path) as lg:
        s = lg.stats()
        console.print(
            f"{rec.log_path}: {s.entries} entries, {s.flushes} flushes, {s.fuas} FUA, "
            f"{s.marks} marks, {s.discards} discards, {s.bytes_written / 2**20:.1f} MiB "
            f"written; log {lg.size / 2**20:.1f} MiB; hash {lg.hash[:16]}",
            markup=False,
        )
    return 0
