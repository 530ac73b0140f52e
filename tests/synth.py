"""Synthetic stores for the query, diff, plot and serve tests: real SQLite, written
through the Store API exactly as a run writes it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.check.host import CheckResult as HostResult
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
    ids: str = "fua",
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
            f"{ids}-{i:03d}",
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


def without_image(tmp_path: Path, monkeypatch: Any) -> None:
    """A host-only run with no guest image built: work files under ``tmp_path``, the
    image and its environment stubbed. Skips without e2fsprogs's tools."""
    import pytest

    from harness import tools
    from harness.experiments import lifecycle
    from harness.store.db import RunEnv

    for tool in ("debugfs", "dumpe2fs", "e2fsck"):
        if not tools.available(tool):
            pytest.skip(f"{tool} not installed (e2fsprogs)")
    monkeypatch.setenv("CRASHLAB_WORK", str(tmp_path / "work"))
    monkeypatch.setattr(lifecycle, "require_image", lambda: SimpleNamespace(hash="img"))
    monkeypatch.setattr(lifecycle, "run_env", lambda img, **_: RunEnv(image_hash=img.hash))


def host_only_check_log(
    log: Path, tmp_path: Path, monkeypatch: Any, extra: Sequence[str] = ()
) -> tuple[Path, Any]:
    """``scenario check-log LOG --host-only`` of a recorded ext4 fixture (32 MiB device)
    without a guest image: the store's path and the run's report. Skips without
    e2fsprogs's tools."""
    from harness.cli import checklog
    from harness.cli.main import build_parser
    from harness.experiments import lifecycle

    without_image(tmp_path, monkeypatch)
    argv = ["check-log", str(log), "--fs", "ext4", "--device-size", "32M", *extra]
    sc = checklog.build(build_parser().parse_args([*argv, "--host-only"]))
    db = tmp_path / "lab.sqlite"
    return db, lifecycle.execute(sc, db=db)


def add_every_kind(store: Store) -> dict[str, str]:
    """One run of every kind but crash replay, shaped as the kinds write them (keys from
    harness/experiments/ and the report modules that read them), and two executions of
    the nightly campaign over crash runs; returns kind -> run id."""
    from harness.config.campaign import Element
    from harness.store.campaigns import element_update
    from harness.store.db import ScanKind

    C, L = Outcome.CONSISTENT, Outcome.DATA_LOSS
    tcg = RunEnv(accelerator=Accelerator.TCG, guest_kernel="6.1.0-18-amd64")
    ids: dict[str, str] = {}

    def begin(name: str, kind: str, scenario: str, params: dict[str, Any], fs: str) -> str:
        ids[name] = store.begin_run(scenario, kind, params, 1, fs=fs, env=tcg)
        return ids[name]

    zfs = begin("zfs", RunKind.ZFS, "resilver-sweep", {"layout": "mirror"}, "zfs")
    for layout, factor in (("mirror", 1.0), ("raidz1", 2.0)):
        for fill in (0.25, 0.5, 0.75):
            for kind in ScanKind:
                store.add_zfs_scan(
                    zfs, repetition=0, kind=kind, layout=layout, fill=fill,
                    seconds=10 * fill * factor, extra={"fill_target": fill},
                )  # fmt: skip

    app = begin("patterns", RunKind.CRASH, "replace-rename", {"fs": {"type": "ext4"}}, "ext4")
    classes = {"noauto_da_alloc": ["new", "old", "empty", "empty"], "auto_da_alloc": ["new"] * 4}
    for opts, seen in classes.items():
        for i, cls in enumerate(seen):
            cell = {"pattern": "rename", "mount_options": opts, "workload": "w", "target": "f"}
            metrics = {"class": cls, "size": 4096 * i}
            store.record_observation(app, f"{opts}/fua-{i}:f", cell, metrics, None)

    search = begin("search", RunKind.CRASH, "ace-seq1", {"fs": {"type": "ext4"}}, "ext4")
    log = LogInfo("log-search", "/nonexistent/log.raw", 100, 5, 10, 4, 0, 1 << 20)
    store.add_log(log, run_id=search)
    for w, (ops, outcomes) in enumerate(
        (("creat(A) fsync(A)", [C, L]), ("creat(A) fsync(A); link(A, B) sync()", [C, C]))
    ):
        wid = f"seq1-{w:06d}"
        store.record_observation(
            search, f"workload:{wid}", {"op_class": "creat", "persistence": "fsync", "seq": 1},
            {"status": "recorded", "record_seconds": 2.0 + w}, None,
        )  # fmt: skip
        for i, o in enumerate(outcomes):
            state = CrashState(f"{wid}/m{i}", log.hash, "mark", prefix=i, last_mark=f"m{i}")
            check = CheckResult(Stage.HOST, "fsck", o, 0.1, exit_status=0)
            store.record_state_result(search, state, [check], {Phase.FSCK: 0.1})
            if o == L:
                cell = {"fs": "ext4", "outcome": "data_loss", "rule": "file-missing"}
                cell |= {"role": "target", "op_class": "creat"}
                store.record_observation(
                    search, f"bug:{state.id}", cell, {"workload": wid, "ops": ops}, None
                )

    faults = begin(
        "faults", RunKind.FAULTS, "fsync-eio",
        {"experiment": "fsync-eio", "fault": {"mode": "eio"}}, "ext4",
    )  # fmt: skip
    for i, o in enumerate((C, L, C)):
        cell = {"type": "ext4", "name": "ext4 ordered", "mount_options": "", "at": i}
        store.record_observation(faults, f"eio-{i}", cell, {"seconds": 0.5, "agree": True}, o)

    recovery = begin("recovery", RunKind.RECOVERY, "recovery-vs-size", {}, "ext4")
    for cell, fs, per_gib in (("ext4 defaults", "ext4", 0.2), ("xfs defaults", "xfs", 0.05)):
        for size in (1, 4, 16):
            store.record_observation(
                recovery, f"{cell} @{size}",
                {"cell": cell, "fs": fs, "size": size, "features": "defaults"},
                {"phases": {"fsck": per_gib * size, "mount": 0.1}, "population": {"files": 100}},
                C,
            )  # fmt: skip

    io = begin("io", RunKind.WORKLOAD, "journal-cost", {}, "ext4")
    for mode, mbps in (("ordered", 40.0), ("journal", 25.0)):
        derived = {"write_mbps": mbps, "read_mbps": 2 * mbps, "write_amplification": 1.5}
        cell = {"type": "ext4", "data_mode": mode, "name": f"ext4 {mode}", "repetition": 0}
        store.record_observation(io, f"ext4 {mode} #0", cell, {"derived": derived}, C)

    for name in ids.values():
        store.finish_run(name, RunStatus.DONE)
    # two nights of the nightly campaign, the second with a finding more
    for night, outcomes in enumerate(([C, C], [C, L])):
        cid = f"night{night}"
        els = [Element(i, "ext4-ordered-fsync", (), seed) for i, seed in enumerate((1, 2))]
        store.begin_campaign(
            cid, "nightly", "campaigns/nightly.toml", "h", "{}", f"2026-01-0{night + 1}T02:00:00",
            "host", 1,
        )  # fmt: skip
        store.add_campaign_elements(
            cid, [(e.key, e.position, e.scenario, "[]", e.seed) for e in els]
        )
        for e in els:
            run = add_run(store, e.scenario, "ext4", "ordered", outcomes, seed=e.seed or 1)
            store.update_element(element_update(cid, e.key, status="done", run_id=run))
        store.finish_campaign(cid, f"2026-01-0{night + 1}T04:00:00")
    return ids


def lost(entry: int | Sequence[int], real: Any) -> Any:
    """A host checker that calls a state unrepairable when ``entry``'s bytes (every one
    of several entries') are not on the image, and otherwise asks ``real``."""
    entries = [entry] if isinstance(entry, int) else list(entry)

    def checked(rp: Any, fs: str, scratch: Path, timeout: float) -> HostResult:
        gone = []
        with open(rp.image, "rb") as f:
            for e in (rp.log.entries[i] for i in entries):
                f.seek(e.offset)
                gone.append(f.read(e.length) != bytes(rp.log.data(e)))
        if all(gone):
            return HostResult("host", "stand-in", Outcome.UNREPAIRABLE, 4, 0.0, "lost")
        return real(rp, fs, scratch, timeout)

    return checked


def minimised_twice(db: Path, run_id: str, state: Any, monkeypatch: Any) -> tuple[Any, Any, int]:
    """Triage a reorder ``state`` of a host-only run twice, its verdict and every
    candidate's judged by a stand-in that fails exactly when the middle one of its dropped
    writes is missing: (first, second, that write)."""
    from harness.crashstate import checking as states
    from harness.crashstate.onelog import commit_state
    from harness.store.db import Store
    from harness.triage import judge, minimal

    culprit = state.dropped[len(state.dropped) // 2]
    with Store.open(db, create=False) as st:
        bad = HostResult("host", "stand-in", Outcome.UNREPAIRABLE, 4, 0.0, "lost")
        commit_state(st, run_id, states.Checked(state, [bad]))
    monkeypatch.setattr(judge.parallel, "checked", lost(culprit, judge.parallel.checked))
    first = minimal.triage(state.id, db)
    again = minimal.triage(state.id, db)
    assert first.entries == again.entries == [culprit]
    return first, again, culprit
