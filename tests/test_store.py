from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.outcome import Outcome
from harness.paths import REPO
from harness.store.db import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    Accelerator,
    CheckResult,
    CrashState,
    LogInfo,
    Phase,
    RunEnv,
    RunKind,
    RunStatus,
    ScanKind,
    Stage,
    Store,
    excerpt,
    percentile,
)

LOG = LogInfo(
    "abc123", "/tmp/w.log", entries=100, flushes=5, fuas=7, marks=2, discards=0, bytes=409600
)
PARAMS = {"data_mode": "ordered", "fs": {"size_mb": 64}}


def state(i: int) -> CrashState:
    return CrashState(
        f"fua-{i:04d}",
        LOG.hash,
        "fua",
        prefix=i * 10,
        last_mark="mkfs",
        description=f"after FUA {i}",
    )


def check(outcome: Outcome = Outcome.CONSISTENT, stage: Stage = Stage.HOST) -> CheckResult:
    return CheckResult(stage, "e2fsck", outcome, seconds=0.25, exit_status=0, output="clean")


def new_run(store: Store, seed: int | None = 1, params: dict[str, object] | None = None) -> str:
    run_id = store.begin_run(
        "ext4-fsync",
        RunKind.CRASH,
        params or PARAMS,
        seed,
        fs="ext4",
        env=RunEnv(accelerator=Accelerator.TCG, guest_kernel="6.1.0"),
    )
    store.add_log(LOG, run_id=run_id)
    return run_id


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results" / "lab.sqlite"


def test_migrates_from_empty(db: Path) -> None:
    with Store.open(db) as store:
        assert store.execute("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert store.execute("PRAGMA application_id") == [(APPLICATION_ID,)]
        assert store.execute("PRAGMA journal_mode") == [("wal",)]
        assert store.execute("PRAGMA foreign_keys") == [(1,)]
        names = {n for (n,) in store.execute("SELECT name FROM sqlite_schema")}
    assert {
        "runs",
        "logs",
        "run_logs",
        "crash_states",
        "checks",
        "recovery_times",
        "verdicts",
        "zfs_scans",
        "v_state_outcomes",
        "v_recovery",
    } <= names


def test_reopen_is_idempotent(db: Path) -> None:
    with Store.open(db) as store:
        run_id = new_run(store)
    schema = sqlite3.connect(db).execute("SELECT sql FROM sqlite_schema ORDER BY name").fetchall()
    with Store.open(db) as store:
        assert store.execute("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert [r.id for r in store.runs()] == [run_id]
    assert (
        sqlite3.connect(db).execute("SELECT sql FROM sqlite_schema ORDER BY name").fetchall()
        == schema
    )


def test_an_empty_file_becomes_a_store(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.touch()
    with Store.open(db) as store:
        assert store.runs() == []


def test_missing_file_without_create_is_input_error(db: Path) -> None:
    with pytest.raises(InputError) as e:
        Store.open(db, create=False)
    assert str(db) in e.value.message
    assert e.value.hint and "no runs yet" in e.value.hint
    assert not db.exists()


def test_text_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("dear diary\n")
    with pytest.raises(InputError) as e:
        Store.open(path)
    assert str(path) in e.value.message and "not an SQLite" in e.value.message
    assert e.value.hint
    assert path.read_text() == "dear diary\n"


def test_foreign_sqlite_file_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "places.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE moz_places (id INTEGER)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(InputError) as e:
        Store.open(path)
    assert str(path) in e.value.message and "moz_places" in e.value.message
    assert path.read_bytes() == before
    assert not (tmp_path / "places.sqlite-wal").exists()


def test_newer_schema_is_refused(db: Path) -> None:
    Store.open(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(InputError, match="newer crashlab"):
        Store.open(db)


def test_damaged_store_is_refused(db: Path) -> None:
    Store.open(db).close()
    conn = sqlite3.connect(db)
    conn.execute("DROP VIEW v_state_outcomes")
    conn.execute("DROP TABLE verdicts")
    conn.close()
    with pytest.raises(InputError, match=r"missing table.*verdicts"):
        Store.open(db)


def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(InputError) as e:
        Store.open(path)
    assert str(path) in e.value.message


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="directory"):
        Store.open(tmp_path)


def test_state_results_and_views(db: Path) -> None:
    with Store.open(db) as store:
        run_id = new_run(store)
        verdicts = [
            store.record_state_result(run_id, state(0), [check()], {Phase.MOUNT: 1.0}),
            store.record_state_result(
                run_id,
                state(1),
                [check(Outcome.REPAIRED), check(Outcome.TIMEOUT, Stage.GUEST)],
                {"fsck": 2.0, "mount": 3.0},
            ),
            store.record_state_result(run_id, state(2), [check()], {}, verdict=Outcome.DATA_LOSS),
        ]
        assert verdicts == [Outcome.CONSISTENT, Outcome.REPAIRED, Outcome.DATA_LOSS]
        rows = store.execute(
            "SELECT run_id, scenario, fs, state_id, outcome FROM v_state_outcomes ORDER BY 4"
        )
        assert rows == [
            (run_id, "ext4-fsync", "ext4", "fua-0000", "consistent"),
            (run_id, "ext4-fsync", "ext4", "fua-0001", "repaired"),
            (run_id, "ext4-fsync", "ext4", "fua-0002", "data_loss"),
        ]
        rec = store.execute(
            "SELECT scenario, fs, data_mode, phase, seconds FROM v_recovery ORDER BY 4, 5"
        )
        assert rec == [
            ("ext4-fsync", "ext4", "ordered", "fsck", 2.0),
            ("ext4-fsync", "ext4", "ordered", "mount", 1.0),
            ("ext4-fsync", "ext4", "ordered", "mount", 3.0),
        ]


def test_recording_a_state_again_replaces_it(db: Path) -> None:
    with Store.open(db) as store:
        run_id = new_run(store)
        store.record_state_result(run_id, state(0), [check(), check()], {"fsck": 1.0})
        store.record_state_result(run_id, state(0), [check(Outcome.UNREPAIRABLE)], {"fsck": 5.0})
        assert store.execute("SELECT count(*) FROM checks") == [(1,)]
        assert store.execute("SELECT seconds FROM recovery_times") == [(5.0,)]
        assert store.run(run_id).outcome_counts == {"unrepairable": 1}


def test_bad_phase_or_unknown_log_writes_nothing(db: Path) -> None:
    with Store.open(db) as store:
        run_id = new_run(store)
        with pytest.raises(ValueError):
            store.record_state_result(run_id, state(0), [check()], {"coffee": 1.0})
        orphan = CrashState("x", "no-such-log", "fua", prefix=1)
        with pytest.raises(sqlite3.IntegrityError):
            store.record_state_result(run_id, orphan, [check()], {})
        assert store.done_state_ids(run_id) == set()
        assert store.execute("SELECT count(*) FROM crash_states") == [(0,)]


_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from harness.outcome import Outcome
    from harness.store.db import *
    store = Store.open(Path(sys.argv[1]))
    log = LogInfo("abc123", "/tmp/w.log", 100, 5, 7, 2, 0, 409600)
    run_id = store.begin_run("ext4-fsync", RunKind.CRASH, {"data_mode": "ordered"}, 42)
    store.add_log(log, run_id=run_id)
    print(run_id, flush=True)
    for i in range(5):
        st = CrashState(f"s{i}", log.hash, "fua", prefix=i)
        ch = CheckResult(Stage.HOST, "e2fsck", Outcome.CONSISTENT, 0.1, 0)
        store.record_state_result(run_id, st, [ch], {"fsck": 0.1})
    # Killed half-way through the sixth state's transaction.
    store._conn.execute("BEGIN IMMEDIATE")
    store._conn.execute(
        "INSERT INTO crash_states (run_id, id, log_hash, generator, prefix)"
        " VALUES (?, 's5', ?, 'fua', 5)", (run_id, log.hash))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_finished_states_survive_sigkill_and_resume(db: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    run_id = proc.stdout.strip()
    with Store.open(db) as store:
        assert store.done_state_ids(run_id) == {f"s{i}" for i in range(5)}
        assert store.execute("SELECT count(*) FROM crash_states") == [(5,)]
        assert store.execute("SELECT count(*) FROM checks") == [(5,)]
        assert store.run(run_id).status is RunStatus.RUNNING
        # Its process is dead, so the run is resumable; key order does not matter.
        assert store.find_resumable_run("ext4-fsync", {"data_mode": "ordered"}, 42) == run_id
        assert store.find_resumable_run("ext4-fsync", {"data_mode": "journal"}, 42) is None
        assert store.find_resumable_run("ext4-fsync", {"data_mode": "ordered"}, 43) is None


def test_find_resumable_run(db: Path) -> None:
    params = {"b": 2, "a": {"y": 1, "x": 0}}
    with Store.open(db) as store:
        done = new_run(store, seed=7, params=params)
        store.finish_run(done, RunStatus.DONE)
        assert store.find_resumable_run("ext4-fsync", params, 7) is None
        live = new_run(store, seed=7, params=params)
        # Still running in a live process (this one): not ours to take over.
        assert store.find_resumable_run("ext4-fsync", params, 7) is None
        store.finish_run(live, RunStatus.INTERRUPTED)
        reordered = {"a": {"x": 0, "y": 1}, "b": 2}
        assert store.find_resumable_run("ext4-fsync", reordered, 7) == live
        assert store.find_resumable_run("ext4-fsync", params, None) is None
        store.record_state_result(live, state(3), [check()], {})
        store.resume_run(live)
        assert store.run(live).status is RunStatus.RUNNING
        assert store.run(live).finished_at is None
        assert store.done_state_ids(live) == {"fua-0003"}


def test_run_lookup_by_prefix(db: Path) -> None:
    with Store.open(db) as store:
        ids = [new_run(store) for _ in range(3)]
        for run_id in ids:
            assert store.run(run_id[:8]).id == run_id
        with pytest.raises(InputError) as e:
            store.run("not-a-run")
        assert e.value.hint and all(i in e.value.hint for i in ids)
        for twin in ("aaaa1", "aaaa2"):
            store.execute(
                "INSERT INTO runs (id, scenario, kind, params, started_at)"
                " VALUES (?, 's', 'crash', '{}', '2024-01-01T00:00:00+00:00')",
                (twin,),
            )
        with pytest.raises(InputError, match="ambiguous") as e:
            store.run("aaaa")
        assert e.value.hint and "aaaa1" in e.value.hint and "aaaa2" in e.value.hint


def test_run_detail(db: Path) -> None:
    with Store.open(db) as store:
        run_id = new_run(store)
        for i in range(10):
            outcome = Outcome.REPAIRED if i == 4 else Outcome.CONSISTENT
            store.record_state_result(
                run_id, state(i), [check(outcome)], {Phase.FSCK: float(i + 1), Phase.MOUNT: 0.5}
            )
        store.add_state(run_id, state(10))
        store.finish_run(run_id, RunStatus.DONE)
        d = store.run_detail(run_id)
    assert d.run.outcome_counts == {"consistent": 9, "repaired": 1}
    assert d.run.summary == {"outcome_counts": {"consistent": 9, "repaired": 1}}
    assert d.run.params == PARAMS
    assert d.run.accelerator == "tcg" and d.run.guest_kernel == "6.1.0"
    assert d.run.duration is not None and d.run.duration >= 0
    assert len(d.states) == 11
    assert [s.id for s in d.states if s.outcome == "repaired"] == ["fua-0004"]
    assert d.states[-1].outcome is None
    fsck, mount = d.recovery
    assert (fsck.phase, fsck.n, fsck.mean, fsck.p50, fsck.max) == ("fsck", 10, 5.5, 5.5, 10.0)
    assert fsck.p95 == pytest.approx(9.55)
    assert (mount.phase, mount.n, mount.p95) == ("mount", 10, 0.5)


def test_zfs_scan_placeholder(db: Path) -> None:
    with Store.open(db) as store:
        run_id = store.begin_run("zfs-scrub", RunKind.ZFS, {"layout": "mirror"}, None, fs="zfs")
        store.add_zfs_scan(
            run_id,
            repetition=0,
            kind=ScanKind.SCRUB,
            layout="mirror",
            seconds=12.5,
            fill=0.5,
            examined=1 << 30,
            errors={"cksum": 0},
        )
        assert store.execute("SELECT kind, seconds, errors FROM zfs_scans") == [
            ("scrub", 12.5, '{"cksum":0}')
        ]


def test_helpers() -> None:
    assert excerpt("short") == "short"
    long = "A" * 3000 + "B" * 3000
    cut = excerpt(long, 100)
    assert cut.startswith("A" * 50) and cut.endswith("B" * 50) and "cut" in cut
    assert percentile([1.0], 0.95) == 1.0
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0


_OPENER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from harness.store.db import RunKind, Store
    with Store.open(Path(sys.argv[1])) as store:
        store.begin_run("race", RunKind.CRASH, {}, int(sys.argv[2]))
""")


def test_concurrent_first_open_migrates_once(db: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(db), str(i)],
            cwd=REPO,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    with Store.open(db) as store:
        assert store.execute("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        assert sorted(r.seed or 0 for r in store.runs()) == list(range(6))


def test_a_version_3_store_is_migrated_and_its_scans_still_read(tmp_path: Path) -> None:
    # Migration 4 (issue 9 item 7) on a store written before it: migrated in place, never
    # reset; its scans read with an unknown time source, and new scans record theirs.
    from harness.store import schema

    db = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(db)
    for stmt in [s for m in schema.MIGRATIONS[:3] for s in m]:
        conn.execute(stmt)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 3")
    conn.execute(
        "INSERT INTO runs (id, scenario, kind, params, started_at, status)"
        " VALUES ('r1', 'zfs-scrub', 'zfs', '{}', '2026-01-01T00:00:00Z', 'done')"
    )
    conn.execute(
        "INSERT INTO zfs_scans (run_id, repetition, kind, layout, seconds, created_at)"
        " VALUES ('r1', 0, 'scrub', 'mirror', 3.0, '2026-01-01T00:00:00Z')"
    )
    conn.commit()
    conn.close()
    with Store.open(db) as store:
        assert store.execute("PRAGMA user_version") == [(SCHEMA_VERSION,)]
        (old,) = store.zfs_scans()
        assert old["seconds"] == 3.0
        assert old["seconds_source"] is None and old["scans"] == []
        store.add_zfs_scan(
            "r1",
            repetition=1,
            kind=ScanKind.SCRUB,
            layout="mirror",
            seconds=2.5,
            extra={"seconds_source": "events", "scans": [[1, 2]]},
        )
        assert store.zfs_scans()[-1]["seconds_source"] == "events"
        with pytest.raises(sqlite3.IntegrityError):
            store.add_zfs_scan(
                "r1",
                repetition=2,
                kind=ScanKind.SCRUB,
                layout="mirror",
                seconds=1.0,
                extra={"seconds_source": "guess"},
            )
