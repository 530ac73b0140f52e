"""Synthetic stores for the query, diff, plot and serve tests: real SQLite, written
through the Store API exactly as a run writes it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.outcome import Outcome
from harness.store.db import (
    Accelerator,
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    RunEnv,
    RunKind,
    RunStatus,
    Stage,
    Store,
)


def add_run(
    store: Store,
    scenario: str,
    fs: str,
    mode: str | None,
    outcomes: Sequence[Outcome],
    *,
    kernel: str = "6.1.0-18-amd64",
    seed: int = 1,
    fsck: float = 0.1,
    ops: int = 50,
) -> str:
    params = {"fs": {"type": fs, **({"data_mode": mode} if mode else {})}, "workload": {"ops": ops}}
    run_id = store.begin_run(
        scenario,
        RunKind.CRASH,
        params,
        seed,
        fs=fs,
        env=RunEnv(accelerator=Accelerator.TCG, guest_kernel=kernel),
    )
    log = LogInfo(f"log-{scenario}-{seed}", "/nonexistent/log.raw", 100, 5, 10, 4, 0, 1 << 20)
    store.add_log(log, run_id=run_id)
    for i, o in enumerate(outcomes):
        state = CrashState(
            f"fua-{i:03d}",
            log.hash,
            "fua" if i % 2 else "mark",
            prefix=10 * i + 5,
            last_mark=f"crashlab:sync:{i}",
            description=f"state {i}",
        )
        check = CheckResult(Stage.HOST, "fsck", o, 0.2, exit_status=0, output="ok")
        store.record_state_result(
            run_id, state, [check], {Phase.FSCK: fsck * (i + 1), Phase.MOUNT: 0.01 * (i + 1)}, o
        )
    store.finish_run(run_id, RunStatus.DONE)
    return run_id


def make_store(path: Path) -> dict[str, str]:
    """Four runs: ext4 ordered x2 (two kernels), ext4 journal, xfs; returns name -> id."""
    C, R, L = Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS
    with Store.open(path) as st:
        return {
            "ordered": add_run(st, "ext4-ordered-fsync", "ext4", "ordered", [C, C, C, R]),
            "ordered2": add_run(
                st,
                "ext4-ordered-fsync",
                "ext4",
                "ordered",
                [C, R, C, L],
                kernel="6.12.0-amd64",
                fsck=0.2,
            ),
            "journal": add_run(st, "ext4-journal-fsync", "ext4", "journal", [C, C], ops=80),
            "xfs": add_run(st, "xfs-fsync", "xfs", None, [C, C, C]),
        }


def run_results_cli(argv: list[str]) -> int:
    """``scenario results ...`` through its own parser, so a report test does not depend
    on the other command groups."""
    from harness.cli import results as cli_results

    parser = argparse.ArgumentParser(prog="scenario")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_results.register(sub)
    args = parser.parse_args(argv)
    status: int = args.func(args)
    return status


def host_only_check_log(
    log: Path, tmp_path: Path, monkeypatch: Any, extra: Sequence[str] = ()
) -> tuple[Path, Any]:
    """``scenario check-log LOG --host-only`` of a recorded ext4 fixture (32 MiB device)
    without a guest image: the store's path and the run's report. Skips without
    e2fsprogs's tools."""
    import pytest

    from harness import tools
    from harness.cli import checklog
    from harness.cli.main import build_parser
    from harness.experiments import lifecycle
    from harness.store.db import RunEnv

    for tool in ("debugfs", "dumpe2fs", "e2fsck"):
        if not tools.available(tool):
            pytest.skip(f"{tool} not installed (e2fsprogs)")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img: RunEnv(image_hash=img.hash))
    argv = ["check-log", str(log), "--fs", "ext4", "--device-size", "32M", *extra]
    sc = checklog.build(build_parser().parse_args([*argv, "--host-only"]))
    db = tmp_path / "lab.sqlite"
    return db, lifecycle.execute(sc, db=db)
